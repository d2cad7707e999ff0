package streaming

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criremotecommand "k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// dialTunnel opens a port-forward tunnelled in WebSocket to s's runtime,
// the echo backend: what the client sends comes back.
func dialTunnel(t *testing.T, s *testServer) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	s.rt.url = s.backend.URL
	u, err := s.Issue(PortForward, &runtimeapi.PortForwardRequest{PodSandboxId: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	d := websocket.Dialer{Subprotocols: []string{tunnelPrefix + "portforward.k8s.io"}}
	c, resp, err := d.Dial("ws://"+s.Addr()+pathOf(t, u), nil)
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { _ = c.Close() })
	// A hang guard, not a measurement.
	_ = c.SetReadDeadline(time.Now().Add(defaultIdleTimeout / 2))
	return c, resp, nil
}

// echo sends p through the tunnel and reads it back.
func echo(t *testing.T, c *websocket.Conn, p string) {
	t.Helper()
	if err := c.WriteMessage(websocket.BinaryMessage, []byte(p)); err != nil {
		t.Fatal(err)
	}
	got := ""
	for len(got) < len(p) {
		_, msg, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("echo of %q after %q: %v", p, got, err)
		}
		got += string(msg)
	}
	if got != p {
		t.Fatalf("echo %q, want %q", got, p)
	}
}

// TestWebSocketTunnelIdleTimeout: a port-forward tunnel that carries no
// byte either way for --stream-idle-timeout ends, both sides, as a
// translated exec does, and frees its place.
func TestWebSocketTunnelIdleTimeout(t *testing.T) {
	cfg := testConfig()
	cfg.IdleTimeout = 100 * time.Millisecond
	s := startServer(t, cfg)
	c, _, err := dialTunnel(t, s)
	if err != nil {
		t.Fatalf("tunnel refused: %v", err)
	}
	echo(t, c, "ping")
	_, _, err = c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) {
		t.Fatalf("an idle tunnel: read %v, want the server's close", err)
	}
	<-s.backend.gone // the runtime's side closed too
	waitFor(t, "the session's end", func() bool {
		return metricValue(t, s.reg, "crishim_stream_websocket_sessions_active") == 0
	})
}

// TestWebSocketTunnelSessionLimit: a port-forward tunnelled in WebSocket
// counts against --stream-max-websocket-sessions with exec and attach:
// refused with 429 past it, either way round, counted; its end frees its
// place.
func TestWebSocketTunnelSessionLimit(t *testing.T) {
	rt := newRuntimeExec(t, []string{"wait"}, criremotecommand.Options{Stdin: true, Stdout: true})
	cfg := testConfig()
	cfg.MaxWebSocketSessions = 1
	s, _ := startWSServer(t, cfg, rt)
	tun, _, err := dialTunnel(t, s)
	if err != nil {
		t.Fatalf("first tunnel refused: %v", err)
	}
	echo(t, tun, "ping")
	if v := metricValue(t, s.reg, "crishim_stream_websocket_sessions_active"); v != 1 {
		t.Errorf("crishim_stream_websocket_sessions_active %v with a tunnel open, want 1", v)
	}
	calls := s.rt.calls.Load()
	if _, resp, err := dialTunnel(t, s); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second tunnel: %v, %v: want 429", err, resp)
	}
	s.rt.url = rt.URL
	req := &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: rt.cmd, Stdin: true, Stdout: true}
	if _, resp, err := dialWS(t, s, req, wsV5); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("an exec with a tunnel open: %v, %v: want 429", err, resp)
	}
	if s.rt.calls.Load() != calls {
		t.Error("a refused session reached the runtime")
	}
	if v := metricValue(t, s.reg, "crishim_stream_websocket_sessions_refused_total"); v != 2 {
		t.Errorf("crishim_stream_websocket_sessions_refused_total %v, want 2", v)
	}

	_ = tun.Close()
	waitFor(t, "the tunnel's end", func() bool {
		return metricValue(t, s.reg, "crishim_stream_websocket_sessions_active") == 0
	})
	first, _, err := dialWS(t, s, req, wsV5)
	if err != nil {
		t.Fatalf("an exec after the tunnel ended refused: %v", err)
	}
	<-rt.started
	if _, resp, err := dialTunnel(t, s); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a tunnel with an exec open: %v, %v: want 429", err, resp)
	}
	_ = first.c.Close()
	rt.waitEnded(t)
}
