package proxy

import "testing"

func TestWindowArithmetic(t *testing.T) {
	type step struct {
		op   string // take, give (inWindow); add, spend (outWindow)
		n    int64
		ok   bool  // take, add
		inc  int64 // give: WINDOW_UPDATE due
		want int64 // avail after the step
	}
	const batch = 100
	tests := []struct {
		name  string
		start int64
		in    bool
		steps []step
	}{
		{"receive within the window", 1000, true, []step{
			{op: "take", n: 400, ok: true, want: 600},
			{op: "take", n: 600, ok: true, want: 0},
			{op: "take", n: 1, ok: false, want: 0},
		}},
		{"updates wait for a batch", 1000, true, []step{
			{op: "take", n: 1000, ok: true, want: 0},
			{op: "give", n: 60, inc: 0, want: 0},
			{op: "give", n: 40, inc: 100, want: 100},
			{op: "give", n: 99, inc: 0, want: 100},
			{op: "give", n: 201, inc: 300, want: 400},
		}},
		{"overrun by one byte", 10, true, []step{
			{op: "take", n: 11, ok: false, want: 10},
		}},
		{"send window opens up to 2^31-1", 65535, false, []step{
			{op: "add", n: h2MaxWindow - 65535, ok: true, want: h2MaxWindow},
			{op: "add", n: 1, ok: false, want: h2MaxWindow},
			{op: "spend", n: 10, want: h2MaxWindow - 10},
			{op: "add", n: 10, ok: true, want: h2MaxWindow},
		}},
		{"overflow leaves the window alone", 1 << 30, false, []step{
			{op: "add", n: 1<<31 - 1, ok: false, want: 1 << 30},
		}},
		{"a lowered initial window may go negative", 100, false, []step{
			{op: "spend", n: 100, want: 0},
			{op: "add", n: -65535, ok: true, want: -65535},
			{op: "add", n: 65535 + 5, ok: true, want: 5},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := inWindow{avail: tt.start}
			out := outWindow{tt.start}
			for i, s := range tt.steps {
				var ok bool
				var inc int64
				switch s.op {
				case "take":
					ok = in.take(s.n)
				case "give":
					inc = in.give(s.n, batch)
				case "add":
					ok = out.add(s.n)
				case "spend":
					out.take(s.n)
				}
				got := out.avail()
				if tt.in {
					got = in.avail
				}
				if (s.op == "take" || s.op == "add") && ok != s.ok {
					t.Errorf("step %d %s(%d) = %v, want %v", i, s.op, s.n, ok, s.ok)
				}
				if inc != s.inc {
					t.Errorf("step %d %s(%d): WINDOW_UPDATE of %d, want %d", i, s.op, s.n, inc, s.inc)
				}
				if got != s.want {
					t.Errorf("step %d %s(%d): window %d, want %d", i, s.op, s.n, got, s.want)
				}
			}
		})
	}
}
