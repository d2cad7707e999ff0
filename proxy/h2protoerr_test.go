package proxy

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/crishim/crishim/metrics"
)

// TestProtocolErrorsAreCountedAndLogged: every GOAWAY and RST_STREAM
// crishim sends for a peer's protocol error leaves a counter and a warning
// naming the peer.
func TestProtocolErrorsAreCountedAndLogged(t *testing.T) {
	m := metrics.New("test", "test", nil)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sock := fakeSock(t)
	startRaw(t, sock, func(int, *http2.Framer, *hpack.Encoder, *bytes.Buffer, uint32) {})
	// The connections never ack the shutdown PING: the second GOAWAY goes
	// after the bound, which the test need not wait out.
	p := startProxyWith(t, dialBackend(t, sock), ServerOptions{Observe: m, Log: log, goAwayTimeout: 10 * time.Millisecond})

	// A connection error: GOAWAY, then the relay hangs up.
	c := dialRaw(t, p.sock)
	_, _ = c.nc.Write(frameHeader(h2DefaultMaxFrame+1, 0xfa, 0, 0))
	c.expectGoAway(t, http2.ErrCodeFrameSize)
	// A stream error: RST_STREAM, the connection stays.
	c = dialRaw(t, p.sock)
	c.headers(1)
	_ = c.fr.WriteWindowUpdate(1, 1<<31-1)
	c.next(t, func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	// Another connection error.
	c = dialRaw(t, p.sock)
	_ = c.fr.WriteData(7, false, []byte("x"))
	c.expectGoAway(t, http2.ErrCodeProtocol)

	want := `
# HELP crishim_relay_protocol_errors_total Protocol errors of peers of the h2 relay answered with GOAWAY or RST_STREAM, by reason.
# TYPE crishim_relay_protocol_errors_total counter
crishim_relay_protocol_errors_total{reason="flow_control"} 1
crishim_relay_protocol_errors_total{reason="frame_size"} 1
crishim_relay_protocol_errors_total{reason="stream_state"} 1
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "crishim_relay_protocol_errors_total"); err != nil {
		t.Error(err)
	}
	// The logs are written by the sessions, which Shutdown waits for.
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	p.server.Shutdown(ctx)
	out := logs.String()
	for _, want := range []string{"reason=frame_size", "reason=flow_control", "reason=stream_state", "peer=client", "uid="} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the warnings:\n%s", want, out)
		}
	}
}

// TestProtocolErrorWarningsAreRateLimited: a peer that keeps making protocol errors gets
// every one counted but only warnBurst warnings an interval; the next interval's first
// warning is preceded by one line saying how many were left out.
func TestProtocolErrorWarningsAreRateLimited(t *testing.T) {
	m := metrics.New("test", "test", nil)
	var mu sync.Mutex
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&lockedWriter{mu: &mu, w: &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	now := time.Unix(1000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	sock := fakeSock(t)
	startRaw(t, sock, func(int, *http2.Framer, *hpack.Encoder, *bytes.Buffer, uint32) {})
	p := startProxyWith(t, dialBackend(t, sock), ServerOptions{Observe: m, Log: log, goAwayTimeout: 10 * time.Millisecond, warnClock: clock})
	badConn := func() {
		c := dialRaw(t, p.sock)
		_, _ = c.nc.Write(frameHeader(h2DefaultMaxFrame+1, 0xfa, 0, 0))
		c.expectGoAway(t, http2.ErrCodeFrameSize)
	}
	const extra = 5
	for range warnBurst + extra {
		badConn()
	}
	mu.Lock()
	now = now.Add(warnInterval)
	mu.Unlock()
	badConn()

	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	p.server.Shutdown(ctx) // the sessions, which log, have ended
	want := fmt.Sprintf(`
# HELP crishim_relay_protocol_errors_total Protocol errors of peers of the h2 relay answered with GOAWAY or RST_STREAM, by reason.
# TYPE crishim_relay_protocol_errors_total counter
crishim_relay_protocol_errors_total{reason="frame_size"} %d
`, warnBurst+extra+1)
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "crishim_relay_protocol_errors_total"); err != nil {
		t.Errorf("every error counted: %v", err)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if n := strings.Count(out, "reason=frame_size"); n != warnBurst+1 {
		t.Errorf("%d protocol error warnings, want %d (the burst, then one in the next interval):\n%s", n, warnBurst+1, out)
	}
	if n := strings.Count(out, "suppressed="); n != 1 || !strings.Contains(out, fmt.Sprintf("suppressed=%d", extra)) {
		t.Errorf("want one line saying %d were suppressed:\n%s", extra, out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
