package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeClock advances a second per reading, so event times are exact.
func fakeClock() func() time.Time {
	t := time.Unix(1700000000, 0)
	return func() time.Time {
		now := t
		t = t.Add(time.Second)
		return now
	}
}

func castLines(t *testing.T, b []byte) (map[string]any, [][]any) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	var hdr map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &hdr); err != nil {
		t.Fatalf("header %q: %v", lines[0], err)
	}
	var evs [][]any
	for _, l := range lines[1:] {
		var ev []any
		if err := json.Unmarshal([]byte(l), &ev); err != nil || len(ev) != 3 {
			t.Fatalf("event %q: %v, want [t, type, data]", l, err)
		}
		evs = append(evs, ev)
	}
	return hdr, evs
}

// TestCast: the header carries version 2, the first resize's size (80x24
// when output came first), the start time and the command; events are
// [t, "o"|"r"|"i", data], input only when asked for, UTF-8 split between
// writes kept whole.
func TestCast(t *testing.T) {
	tests := []struct {
		name   string
		input  bool
		play   func(c *Cast)
		width  float64
		height float64
		events string
		raw    string // in the file as written
	}{
		{"resize first", false, func(c *Cast) {
			c.Resize(120, 40)
			c.Output([]byte("$ "))
			c.Input([]byte("secret\r"))
			c.Resize(100, 30)
		}, 120, 40, `[[1,"o","$ "],[2,"r","100x30"]]`, ""},
		{"output first", false, func(c *Cast) {
			c.Output([]byte("hi\r\n"))
			c.Resize(120, 40)
		}, 80, 24, `[[1,"o","hi\r\n"],[2,"r","120x40"]]`, ""},
		{"input recorded", true, func(c *Cast) {
			c.Resize(10, 5)
			c.Input([]byte("ls\r"))
		}, 10, 5, `[[1,"i","ls\r"]]`, ""},
		{"split rune", false, func(c *Cast) {
			c.Output([]byte("caf\xc3"))
			c.Output([]byte("\xa9!"))
		}, 80, 24, `[[1,"o","caf"],[2,"o","é!"]]`, ""},
		{"nothing shown", false, func(*Cast) {}, 80, 24, `null`, ""},
		{"html characters", false, func(c *Cast) {
			c.Output([]byte("a<b>&"))
		}, 80, 24, `[[1,"o","a<b>&"]]`, `"a<b>&"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			c := NewCast(&buf, CastHeader{Command: "sh -c ls", Env: map[string]string{"TERM": "xterm"}}, 0, tt.input, fakeClock())
			tt.play(c)
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			hdr, evs := castLines(t, buf.Bytes())
			want := map[string]any{"version": 2.0, "width": tt.width, "height": tt.height, "timestamp": 1700000000.0, "command": "sh -c ls"}
			for k, v := range want {
				if hdr[k] != v {
					t.Errorf("header %s = %v, want %v (%s)", k, hdr[k], v, buf.String())
				}
			}
			got, _ := marshal(evs)
			got = bytes.TrimSuffix(got, []byte("\n"))
			if string(got) != tt.events {
				t.Errorf("events %s, want %s", got, tt.events)
			}
			if !strings.Contains(buf.String(), tt.raw) {
				t.Errorf("file %s lacks %s", buf.String(), tt.raw)
			}
			if c.Cut() {
				t.Error("Cut without a limit")
			}
		})
	}
}

// TestCastCut: past max bytes the recording ends with an output event and a
// marker saying it was cut, and records nothing more.
func TestCastCut(t *testing.T) {
	var buf bytes.Buffer
	c := NewCast(&buf, CastHeader{}, 200, false, fakeClock())
	c.Resize(80, 24)
	c.Output([]byte("first\r\n"))
	c.Output(bytes.Repeat([]byte("x"), 200))
	c.Output([]byte("after\r\n"))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !c.Cut() {
		t.Error("Cut() = false")
	}
	_, evs := castLines(t, buf.Bytes())
	if len(evs) != 3 || evs[0][2] != "first\r\n" || evs[1][1] != "o" || !strings.Contains(evs[1][2].(string), "recording cut") ||
		evs[2][1] != "m" {
		t.Fatalf("events %v: want first, the cut notice, a marker", evs)
	}
	if strings.Contains(buf.String(), "xxx") || strings.Contains(buf.String(), "after") {
		t.Errorf("recorded past the limit:\n%s", buf.String())
	}
}

type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestCastWriteError: a write error stops the recording and is reported.
func TestCastWriteError(t *testing.T) {
	c := NewCast(brokenWriter{}, CastHeader{}, 0, false, fakeClock())
	c.Output([]byte("x"))
	c.Output([]byte("y"))
	if err := c.Close(); err == nil || !strings.Contains(err.Error(), "no space") || c.Cut() {
		t.Errorf("Close = %v, Cut = %v; want the write error, not a cut", err, c.Cut())
	}
}

// TestCreateRecording: the directory is made 0700, the file 0600, named by
// time and session ID.
func TestCreateRecording(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions")
	f, err := CreateRecording(dir, "abc", time.Date(2026, 11, 23, 18, 1, 2, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if want := filepath.Join(dir, "20261123T180102Z-abc.cast"); f.Name() != want {
		t.Errorf("file %s, want %s", f.Name(), want)
	}
	for path, mode := range map[string]os.FileMode{dir: 0o700, f.Name(): 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode().Perm(), err, mode)
		}
	}
}

func TestRecordMode(t *testing.T) {
	tests := []struct {
		node, pod RecordMode
		tty, rec  bool
	}{
		{RecordNone, "", true, false},
		{RecordNone, RecordTTY, true, true},
		{RecordNone, RecordTTY, false, false},
		{RecordTTY, RecordNone, true, true},
		{RecordTTY, "", false, false},
		{RecordTTY, RecordAll, false, true},
		{RecordAll, RecordTTY, false, true},
	}
	for _, tt := range tests {
		if got := tt.node.Stronger(tt.pod).Records(tt.tty); got != tt.rec {
			t.Errorf("node %q pod %q tty %v: recorded %v, want %v", tt.node, tt.pod, tt.tty, got, tt.rec)
		}
	}
}
