package streaming

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/metrics"
)

// TestRecordedSessionThroughServer: a session selected for recording is
// written as it passes and its ended audit event names the file; a session
// the runtime refused leaves no file.
func TestRecordedSessionThroughServer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions")
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	cfg := testConfig()
	cfg.Record = audit.RecordConfig{Mode: audit.RecordAll, Dir: dir}
	l, err := audit.Open(audit.Config{Path: auditPath}, metrics.NewAudit(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := startServerWith(t, cfg, Deps{Audit: l})

	s.rt.err = status.Error(codes.NotFound, "container gone")
	u, err := s.Issue(Exec, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"ls"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, resp := upgradeTo(t, s.Addr(), http.MethodPost, pathOf(t, u), "SPDY/3.1"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("refused session answered %s", resp.Status)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Errorf("a refused session left %v", files)
	}

	s.rt.err = nil
	u, err = s.Issue(Exec, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"ls"}})
	if err != nil {
		t.Fatal(err)
	}
	c, br, resp := upgradeTo(t, s.Addr(), http.MethodPost, pathOf(t, u), "SPDY/3.1")
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %s", resp.Status)
	}
	// The echo backend sends the client's frames back: the stdout data
	// passes both ways, so it is recorded twice.
	frames := newSPDYFrames(t)
	frames.syn(t, idStdout, "stdout")
	frames.data(t, idStdout, "hello\r\n")
	want := frames.buf.Len()
	if _, err := c.Write(frames.buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(br, make([]byte, want)); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	var end audit.Event
	waitFor(t, "the session's ended event", func() bool {
		f, err := os.Open(auditPath)
		if err != nil {
			return false
		}
		defer f.Close()
		evs, _ := audit.Decode(f)
		for _, ev := range evs {
			if ev.Stage == audit.StageEnded && ev.Error == "" {
				end = ev
				return true
			}
		}
		return false
	})
	if filepath.Dir(end.Recording) != dir {
		t.Fatalf("ended event recording %q, want a file in %s", end.Recording, dir)
	}
	b, err := os.ReadFile(end.Recording)
	if err != nil || strings.Count(string(b), `"o", "hello\r\n"]`) != 2 {
		t.Errorf("recording %s (%v): want the stdout data twice", b, err)
	}
}

// atomicRecordErrors counts record errors reported from the server's
// goroutines.
type atomicRecordErrors struct{ n atomic.Int64 }

func (c *atomicRecordErrors) RecordError() { c.n.Add(1) }

// TestWebSocketRecordErrorsAreCounted: a WebSocket session selected for
// recording whose file cannot be made is counted in
// crishim_record_errors_total, as a SPDY one is; the session itself goes
// on.
func TestWebSocketRecordErrorsAreCounted(t *testing.T) {
	cfg := testConfig()
	errs := &atomicRecordErrors{}
	cfg.Record = audit.RecordConfig{Mode: audit.RecordAll, Dir: "/dev/null/sessions"}
	s := startServerWith(t, cfg, Deps{RecordErrors: errs})
	u, err := s.Issue(Exec, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: []string{"ls"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	d := websocket.Dialer{Subprotocols: []string{"v5.channel.k8s.io"}}
	c, _, err := d.Dial("ws://"+s.Addr()+pathOf(t, u), nil)
	if err != nil {
		t.Fatalf("WebSocket session refused: %v", err)
	}
	defer c.Close()
	// The recording is started before the client's upgrade is answered.
	if n := errs.n.Load(); n != 1 {
		t.Errorf("%d record errors, want 1", n)
	}
}
