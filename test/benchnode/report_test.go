package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/crishim/crishim/test/node"
)

func TestQuantileInterpolatesWithinTheBucket(t *testing.T) {
	h := histogram{bounds: []float64{0.1, 0.2, math.Inf(1)}, counts: []float64{10, 30, 40}, total: 40}
	for _, tc := range []struct {
		q, want float64
	}{
		{0.25, 0.1},   // rank 10: the top of the first bucket
		{0.5, 0.15},   // rank 20: half way through the second
		{0.125, 0.05}, // rank 5: half way through the first, which starts at 0
		{0.99, 0.2},   // in +Inf: the highest finite bound
	} {
		if got := h.quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := (histogram{}).quantile(0.5); !math.IsNaN(got) {
		t.Errorf("quantile of nothing = %v, want NaN", got)
	}
}

func TestSinceCountsTheTurnOnly(t *testing.T) {
	before := scrape{"op/a": {bounds: []float64{1, math.Inf(1)}, counts: []float64{5, 6}, total: 6}}
	after := scrape{
		"op/a": {bounds: []float64{1, math.Inf(1)}, counts: []float64{7, 10}, total: 10},
		"op/b": {bounds: []float64{1, math.Inf(1)}, counts: []float64{1, 1}, total: 1},
	}
	d := after.since(before)
	if a := d["op/a"]; a.total != 4 || a.counts[0] != 2 || a.counts[1] != 4 {
		t.Errorf("op/a over the turn: %+v, want 2 and 4 of 4", a)
	}
	if b := d["op/b"]; b.total != 1 {
		t.Errorf("op/b, new in the turn: %+v, want all of it", b)
	}
	// A kubelet restarted in between starts from zero: its counts are the turn's.
	restarted := scrape{"op/a": {bounds: []float64{1, math.Inf(1)}, counts: []float64{1, 2}, total: 2}}
	if a := restarted.since(before)["op/a"]; a.total != 2 {
		t.Errorf("after a restart: %+v, want the counts as they are", a)
	}
}

// TestReportEndsWithTheWorstRatio: the last line is the one scripts read, and names the
// largest kubelet-side ratio, operations with too few calls left out.
func TestReportEndsWithTheWorstRatio(t *testing.T) {
	op := func(sec float64, n float64) histogram {
		return histogram{bounds: []float64{sec, math.Inf(1)}, counts: []float64{n, n}, total: n}
	}
	turns := []turn{
		{side: sideDirect, startups: []time.Duration{time.Second}, kubelet: scrape{"op/list": op(0.01, 100), "op/rare": op(0.01, 2)}, cpBps: 100},
		{side: sideCrishim, startups: []time.Duration{time.Second}, kubelet: scrape{"op/list": op(0.0125, 100), "op/rare": op(1, 2)}, cpBps: 99},
	}
	var out bytes.Buffer
	printReport(&out, options{pods: 1, turns: 1, cpBytes: 1 << 20}, &node.Node{}, turns)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; last != "worst kubelet-side ratio crishim/direct = 1.250" {
		t.Errorf("last line %q, want the list operation's 1.250 (rare has too few calls)\n%s", last, out.String())
	}
	if strings.Contains(out.String(), "rare") {
		t.Errorf("an operation with %d calls is compared:\n%s", 2, out.String())
	}
}
