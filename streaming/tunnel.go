package streaming

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

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

	// The client's direction is parsed when a tap is set (the ports of an
	// audited port-forward); the runtime's never needs to be.
	var src io.Reader = tc
	if sess.tap != nil {
		tw, end := sess.tap.writer(true)
		defer end()
		src = io.TeeReader(tc, tw)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(tc, struct{ io.Reader }{br}) // runtime to client
		_ = tc.Close()
	}()
	_, _ = io.Copy(struct{ io.Writer }{rc}, src) // client to runtime
	_ = rc.Close()
	<-done
}
