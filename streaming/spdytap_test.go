package streaming

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/moby/spdystream/spdy"

	"github.com/crishim/crishim/audit"
)

// spdyFrames writes one direction of a session as a SPDY framer would:
// one framer per direction, since header compression is stateful.
type spdyFrames struct {
	buf bytes.Buffer
	f   *spdy.Framer
}

func newSPDYFrames(t *testing.T) *spdyFrames {
	s := &spdyFrames{}
	f, err := spdy.NewFramer(&s.buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.f = f
	return s
}

func (s *spdyFrames) syn(t *testing.T, id spdy.StreamId, typ string) {
	h := http.Header{}
	h.Set("streamtype", typ)
	if err := s.f.WriteFrame(&spdy.SynStreamFrame{StreamId: id, Headers: h}); err != nil {
		t.Fatal(err)
	}
}

func (s *spdyFrames) data(t *testing.T, id spdy.StreamId, p string) {
	if err := s.f.WriteFrame(&spdy.DataFrame{StreamId: id, Data: []byte(p)}); err != nil {
		t.Fatal(err)
	}
}

type countRecordErrors struct{ n int }

func (c *countRecordErrors) RecordError() { c.n++ }

// Stream IDs as a remotecommand client opens them.
const (
	idError spdy.StreamId = iota*2 + 1
	idStdin
	idStdout
	idStderr
	idResize
)

// TestSPDYTap: a session's frames, both directions, become the asciicast
// events and the exit status: output from stdout and stderr, resizes from
// the resize stream (split between frames too), input only when asked,
// data that arrives before its stream's SYN_STREAM kept for it.
func TestSPDYTap(t *testing.T) {
	tests := []struct {
		name          string
		input         bool
		runtimeFirst  bool // the runtime's frames parsed before the client's
		client, rtime func(t *testing.T, c *spdyFrames)
		width, height float64
		events        string
		exit          int32
	}{
		{
			name: "tty",
			client: func(t *testing.T, c *spdyFrames) {
				c.syn(t, idError, "error")
				c.syn(t, idStdin, "stdin")
				c.syn(t, idStdout, "stdout")
				c.syn(t, idResize, "resize")
				c.data(t, idResize, `{"Width":123,"Height":45}`+"\n"+`{"Width":90,"Height":30}`+"\n")
				c.data(t, idStdin, "secret\r")
				c.data(t, idResize, `{"Width":100,`)
				c.data(t, idResize, `"Height":50}`+"\n")
			},
			rtime: func(t *testing.T, c *spdyFrames) {
				c.data(t, idStdout, "$ ")
				c.data(t, idError, `{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}`)
			},
			width: 123, height: 45,
			events: `["r","90x30"],["r","100x50"],["o","$ "]`,
			exit:   3,
		},
		{
			name:  "input recorded",
			input: true,
			client: func(t *testing.T, c *spdyFrames) {
				c.syn(t, idStdin, "stdin")
				c.data(t, idStdin, "ls\r")
			},
			rtime: func(*testing.T, *spdyFrames) {},
			width: 80, height: 24,
			events: `["i","ls\r"]`,
		},
		{
			name:         "no tty, data before its stream is known",
			runtimeFirst: true,
			client: func(t *testing.T, c *spdyFrames) {
				c.syn(t, idError, "error")
				c.syn(t, idStdout, "stdout")
				c.syn(t, idStderr, "stderr")
			},
			rtime: func(t *testing.T, c *spdyFrames) {
				c.data(t, idStdout, "out\n")
				c.data(t, idStderr, "err\n")
				c.data(t, idError, `{"status":"Success"}`)
			},
			width: 80, height: 24,
			events: `["o","out\n"],["o","err\n"]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := audit.CreateRecording(t.TempDir(), "s1", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			errs := &countRecordErrors{}
			rec := &recording{path: f.Name(), f: f, cast: audit.NewCast(f, audit.CastHeader{Command: "sh"}, 0, tt.input, time.Now),
				log: slog.New(slog.DiscardHandler), errs: errs}
			exit := &exitStatus{}
			req, _ := http.NewRequest("POST", "http://x/exec/t", nil)
			req.Header.Set("Upgrade", "SPDY/3.1")
			tap := newSPDYTap(req, exit, rec)
			client, rtime := newSPDYFrames(t), newSPDYFrames(t)
			tt.client(t, client)
			tt.rtime(t, rtime)
			if tt.runtimeFirst {
				tap.parse(&rtime.buf, false)
				tap.parse(&client.buf, true)
			} else {
				tap.parse(&client.buf, true)
				tap.parse(&rtime.buf, false)
			}
			rec.close()
			if errs.n != 0 {
				t.Errorf("%d record errors", errs.n)
			}
			b, err := os.ReadFile(rec.path)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			var hdr audit.CastHeader
			if err := json.Unmarshal([]byte(lines[0]), &hdr); err != nil || hdr.Width != int(tt.width) || hdr.Height != int(tt.height) {
				t.Errorf("header %s (%v): want %vx%v", lines[0], err, tt.width, tt.height)
			}
			var got []string
			for _, l := range lines[1:] {
				var ev []any
				if err := json.Unmarshal([]byte(l), &ev); err != nil {
					t.Fatalf("event %s: %v", l, err)
				}
				e, _ := json.Marshal(ev[1:])
				got = append(got, string(e))
			}
			if g := strings.Join(got, ","); g != tt.events {
				t.Errorf("events %s, want %s", g, tt.events)
			}
			if code, _ := parseExitStatus(exit.status); code != tt.exit {
				t.Errorf("exit code %d, want %d", code, tt.exit)
			}
		})
	}
}

// TestSPDYTapOnlyForSPDY: WebSocket sessions and sessions nobody taps keep
// the kernel copy.
func TestSPDYTapOnlyForSPDY(t *testing.T) {
	req, _ := http.NewRequest("GET", "http://x/exec/t", nil)
	req.Header.Set("Upgrade", "websocket")
	if newSPDYTap(req, &exitStatus{}) != nil {
		t.Error("a WebSocket session is tapped")
	}
	req.Header.Set("Upgrade", "SPDY/3.1")
	if newSPDYTap(req) != nil {
		t.Error("a session without sinks is tapped")
	}
}

// TestSPDYTapHeaderBomb: a SYN_STREAM whose small zlib block decompresses
// to 256 MiB of headers (a user with pods/exec can send it through
// kube-apiserver and the kubelet) stops the parse at the first header over
// the limits: the heap stays flat, the stop is reported once, and the rest
// of the direction is drained so the session's copy never waits on the
// parser.
func TestSPDYTapHeaderBomb(t *testing.T) {
	bomb := newSPDYFrames(t)
	big := strings.Repeat("a", 1<<20) // the framer's default limit per value
	// 256 MiB as an attacker would send it; -short (make unit) 32 MiB,
	// still eight times the budget, compressed in a quarter second.
	n := 256
	if testing.Short() {
		n = 32
	}
	h := http.Header{}
	for i := range n {
		h[fmt.Sprintf("h%03d", i)] = []string{big}
	}
	if err := bomb.f.WriteFrame(&spdy.SynStreamFrame{StreamId: idStdin, Headers: h}); err != nil {
		t.Fatal(err)
	}
	bomb.data(t, idStdin, "after the bomb")
	frame := bomb.buf.Bytes()
	t.Logf("bomb: %d bytes on the wire, %d MiB of headers", len(frame), n)

	var stops []error
	tap := newTap(&exitStatus{})
	tap.stopped = func(toRuntime bool, err error) {
		if !toRuntime {
			t.Error("stop reported for the runtime's direction")
		}
		stops = append(stops, err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w, end := tap.writer(true)
	if _, err := io.Copy(w, bytes.NewReader(frame)); err != nil {
		t.Fatalf("the session's copy failed: %v", err)
	}
	end()
	tap.wait()
	runtime.ReadMemStats(&after)
	// The framer's own state (its unused header compressor, ~1 MiB) and
	// one block's worth of headers; before the limits, 256 MiB and more.
	const budget = 4 << 20
	if got := after.TotalAlloc - before.TotalAlloc; got > budget {
		t.Errorf("parsing the bomb allocated %d MiB, budget %d MiB", got>>20, budget>>20)
	} else {
		t.Logf("parsing the bomb allocated %d KiB", got>>10)
	}
	if len(stops) != 1 {
		t.Errorf("stop reported %d times (%v), want once", len(stops), stops)
	}
}

// TestSPDYTapLimitsFitRemotecommand: the headers client-go's exec and
// port-forward clients send parse within the limits.
func TestSPDYTapLimitsFitRemotecommand(t *testing.T) {
	c := newSPDYFrames(t)
	h := http.Header{}
	h.Set("streamtype", "data")
	h.Set("port", "65535")
	h.Set("requestid", "4294967295")
	if err := c.f.WriteFrame(&spdy.SynStreamFrame{StreamId: 1, Headers: h}); err != nil {
		t.Fatal(err)
	}
	ports := &portsSeen{}
	tap := newTap(ports)
	tap.stopped = func(_ bool, err error) { t.Errorf("parse stopped: %v", err) }
	tap.parse(&c.buf, true)
	if got := ports.list(); len(got) != 1 || got[0] != 65535 {
		t.Errorf("ports %v, want [65535]", got)
	}
}
