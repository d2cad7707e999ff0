package streaming

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
)

// tunnelPrefix marks the WebSocket subprotocols that carry SPDY: a
// port-forward client that speaks WebSocket to the API server (client-go's
// NewSPDYOverWebsocketDialer, crictl -r websocket) sends SPDY inside binary
// messages, and kube-apiserver takes it out for the kubelet.
const tunnelPrefix = "SPDY/3.1+"

// runtimeAnswerMax bounds what is read of a runtime's refusal.
const runtimeAnswerMax = 4 << 10

// isTunnel reports a WebSocket upgrade asking for SPDY inside.
func isTunnel(r *http.Request) bool {
	for _, p := range websocket.Subprotocols(r) {
		if strings.HasPrefix(p, tunnelPrefix) {
			return true
		}
	}
	return false
}

// tunnel serves a port-forward whose SPDY comes inside WebSocket, as
// kube-apiserver's tunnelling handler does: runtimes serve no such
// subprotocol. crishim upgrades to SPDY at the runtime with the protocols
// the client offers, answers the client's WebSocket with the one the
// runtime chose, then copies the SPDY bytes between the two, so client and
// runtime speak SPDY to each other.
func (s *Server) tunnel(w http.ResponseWriter, r *http.Request, sess *session, loc *url.URL, log *slog.Logger) {
	up, err := http.NewRequestWithContext(sess.ctx, http.MethodPost, loc.String(), nil)
	if err != nil {
		sess.err = fmt.Errorf("runtime stream URL: %w", err)
		http.Error(w, "crishim: "+sess.err.Error(), http.StatusInternalServerError)
		return
	}
	up.Header.Set(httpstream.HeaderConnection, httpstream.HeaderUpgrade)
	up.Header.Set(httpstream.HeaderUpgrade, spdy.HeaderSpdy31)
	for _, p := range websocket.Subprotocols(r) {
		if v, ok := strings.CutPrefix(p, tunnelPrefix); ok {
			up.Header.Add(httpstream.HeaderProtocolVersion, v)
		}
	}
	rt, err := spdy.NewRoundTripperWithConfig(spdy.RoundTripperConfig{UpgradeTransport: sess.runtimeTransport()})
	if err != nil {
		sess.err = fmt.Errorf("SPDY round tripper: %w", err)
		http.Error(w, "crishim: "+sess.err.Error(), http.StatusInternalServerError)
		return
	}
	rc, err := rt.Dial(up) // dials and sends the upgrade request
	if err != nil {
		sess.err = fmt.Errorf("runtime stream: %w", err)
		log.Warn("stream to the runtime failed", "err", err)
		http.Error(w, "crishim: "+sess.err.Error(), http.StatusBadGateway)
		return
	}
	defer rc.Close()
	br := bufio.NewReader(rc)
	resp, err := http.ReadResponse(br, up)
	if err != nil {
		sess.err = fmt.Errorf("runtime stream: %w", err)
		log.Warn("stream to the runtime failed", "err", err)
		http.Error(w, "crishim: "+sess.err.Error(), http.StatusBadGateway)
		return
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, runtimeAnswerMax))
		sess.err = fmt.Errorf("runtime refused the SPDY upgrade: %s: %s", resp.Status, strings.TrimSpace(string(body)))
		log.Warn("stream to the runtime failed", "err", sess.err)
		http.Error(w, "crishim: "+sess.err.Error(), resp.StatusCode)
		return
	}
	conn, err := upgradeWebSocket(w, r, sess, tunnelPrefix+resp.Header.Get(httpstream.HeaderProtocolVersion))
	if err != nil {
		return // answered by the upgrader
	}
	// Messages are read as they come (TunnelingConnection reads each a
	// piece at a time); the limit only refuses what no client sends.
	conn.SetReadLimit(wsReadLimit)
	tc := portforward.NewTunnelingConnection("crishim", conn)
	defer tc.Close()

	// No byte either way for --stream-idle-timeout closes both sides,
	// which ends both copies, even one writing to a client that stopped
	// reading.
	idle := newIdleCut(s.cfg.IdleTimeout, func() {
		log.Info("port-forward tunnel idle; closed", "idle_timeout", s.cfg.IdleTimeout)
		_ = tc.Close()
		_ = rc.Close()
	})
	defer idle.stop()

	// The client's direction is parsed when a tap is set (the ports of an
	// audited port-forward); the runtime's never needs to be.
	var src io.Reader = idleReader{tc, idle}
	if sess.tap != nil {
		tw, end := sess.tap.writer(true)
		defer end()
		src = io.TeeReader(src, tw)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(idleWriter{tc, idle}, struct{ io.Reader }{br}) // runtime to client
		_ = tc.Close()
	}()
	_, _ = io.Copy(struct{ io.Writer }{rc}, src) // client to runtime
	_ = rc.Close()
	<-done
}

// idleCut calls cut once no byte moved either way for d (never when d is
// 0), as wsstream's idle timeout ends a translated session and
// spdystream's a runtime's SPDY session. The bytes are the tunnel's SPDY,
// pings included: a client that pings (client-go's tunnelling dialer, every
// 10 s) is not idle, as it is not at the runtime; WebSocket control frames
// carry no tunnel byte and keep nothing open.
type idleCut struct {
	d       time.Duration
	start   time.Time    // last is counted from here (monotonic)
	last    atomic.Int64 // time since start of the last byte moved
	mu      sync.Mutex   // timer's assignment, before its function reads it
	timer   *time.Timer
	stopped bool // the tunnel ended: nothing left to cut
}

func newIdleCut(d time.Duration, cut func()) *idleCut {
	c := &idleCut{d: d, start: time.Now()}
	if d <= 0 {
		return c
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timer = time.AfterFunc(d, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.stopped {
			return
		}
		// Only the timer's function resets the timer: the copies just
		// note the time, once per read or write.
		if left := c.d - (time.Since(c.start) - time.Duration(c.last.Load())); left > 0 {
			c.timer.Reset(left)
			return
		}
		cut()
	})
	return c
}

// moved notes bytes moved now.
func (c *idleCut) moved() { c.last.Store(int64(time.Since(c.start))) }

// stop ends the timer once the tunnel ended.
func (c *idleCut) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if c.timer != nil {
		c.timer.Stop()
	}
}

// idleReader notes what r reads in c.
type idleReader struct {
	r io.Reader
	c *idleCut
}

func (r idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.c.moved()
	}
	return n, err
}

// idleWriter notes what w wrote in c: a write blocked on a client that
// does not read is no activity.
type idleWriter struct {
	w io.Writer
	c *idleCut
}

func (w idleWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if n > 0 {
		w.c.moved()
	}
	return n, err
}
