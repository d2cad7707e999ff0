package streaming

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/proxy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/metrics"
)

// runtimeCallTimeout bounds asking the runtime for its URL; the client is
// waiting for its upgrade meanwhile.
const runtimeCallTimeout = 30 * time.Second

// handler serves the tokens of one kind: consume the token, then ask the
// runtime for its own URL, then proxy the upgraded connection there.
func (s *Server) handler(kind Kind) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stored, res := s.cache.consume(kind, r.PathValue("token"))
		switch res {
		case unknown:
			s.metrics.TokenRejected(string(kind), "unknown")
			http.NotFound(w, r)
			return
		case expired:
			s.metrics.TokenRejected(string(kind), "expired")
			http.NotFound(w, r)
			return
		}
		p, _ := stored.(pending)
		req := p.req
		r, span := s.startSpan(r, kind, p)
		if !httpstream.IsUpgradeRequest(r) {
			endSpan(span, nil, errNotUpgrade)
			http.Error(w, "crishim: stream URLs serve SPDY or WebSocket upgrades only", http.StatusBadRequest)
			return
		}
		sess, ok := s.open(kind, r)
		if !ok {
			endSpan(span, nil, errShuttingDown)
			http.Error(w, "crishim: shutting down", http.StatusServiceUnavailable)
			return
		}
		defer s.finish(sess)
		// Deferred first, so it runs after the stream and its audit ended.
		defer endSpan(span, sess, nil)
		audited := s.audit.Start(auditStart(kind, req, p.who, r.RemoteAddr))
		defer func() { audited.End(sess.auditEnd) }()
		if err := audited.Refused(); err != nil {
			// --audit-required: nothing unrecorded reaches the runtime.
			sess.err = err
			s.log.Warn("stream refused", "kind", string(kind), "remote", r.RemoteAddr, "err", err)
			http.Error(w, "crishim: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		log := s.log.With("kind", string(kind), "remote", r.RemoteAddr)
		log = withTarget(log, req)
		translated := kind != PortForward && isWebSocket(r)
		tunnelled := kind == PortForward && isTunnel(r)
		if translated || tunnelled {
			release, err := s.acquireWebSocket()
			if err != nil {
				sess.err = err
				log.Warn("stream refused", "err", err)
				http.Error(w, "crishim: "+err.Error(), http.StatusTooManyRequests)
				return
			}
			defer release()
		}

		loc, err := s.runtimeURL(sess.ctx, req)
		if err != nil {
			sess.err = err
			log.Warn("stream refused by the runtime", "err", err)
			s.writeError(w, err)
			return
		}
		// Only now: a session the runtime refused leaves no empty file.
		rec := s.startRecording(kind, p, audited.ID(), log)
		// Before the ended event, which names the file: the parsers end
		// with the copies, which the proxy has ended by then.
		defer func() {
			sess.tap.wait()
			sess.rec.close()
		}()
		log.Debug("stream to runtime", "runtime_url_host", loc.Host)
		if translated {
			sess.rec = rec
			s.translate(w, r, sess, loc, req, rec.sinks(), log)
			log.Info("stream ended", "duration", time.Since(sess.start).Round(time.Millisecond),
				"bytes_to_runtime", sess.toRuntime.Load(), "bytes_to_client", sess.toClient.Load(), "err", sess.err)
			return
		}
		sess.tapStreams(rec, audited != nil && kind == Exec, audited != nil && kind == PortForward, r)
		if tunnelled {
			sess.tapPorts(audited != nil)
		}
		s.watchParse(sess, log)
		if tunnelled {
			s.tunnel(w, r, sess, loc, log)
			log.Info("stream ended", "duration", time.Since(sess.start).Round(time.Millisecond),
				"bytes_to_runtime", sess.toRuntime.Load(), "bytes_to_client", sess.toClient.Load(), "err", sess.err)
			return
		}
		h := proxy.NewUpgradeAwareHandler(loc, sess.runtimeTransport(), false, true, upgradeResponder{log: log, sess: sess})
		h.ServeHTTP(&hijackRecorder{ResponseWriter: w, sess: sess}, r.WithContext(klog.NewContext(sess.ctx, proxyLogger(log))))
		// The proxy returns when one direction ends, having closed both
		// connections; the other may still be counting its last chunk. A
		// copy that only starts now finds them closed and moves nothing.
		sess.waitCopies()
		log.Info("stream ended", "duration", time.Since(sess.start).Round(time.Millisecond),
			"bytes_to_runtime", sess.toRuntime.Load(), "bytes_to_client", sess.toClient.Load(), "err", sess.err)
	})
}

// watchParse logs and counts a session whose SPDY parse stops early: the
// session goes on, its audit event and recording without what the rest of
// its frames said.
func (s *Server) watchParse(sess *session, log *slog.Logger) {
	if sess.tap == nil {
		return
	}
	sess.tap.stopped = func(toRuntime bool, err error) {
		dir := "to_client"
		if toRuntime {
			dir = "to_runtime"
		}
		log.Warn("SPDY parse stopped; the session goes on unparsed", "direction", dir, "err", err)
		s.metrics.ParseStopped(string(sess.kind))
	}
}

// acquireWebSocket counts a WebSocket session crishim serves itself (exec
// and attach translated, port-forward tunnelled), or refuses it at
// --stream-max-websocket-sessions: each holds a WebSocket server, SPDY
// toward the runtime and their goroutines until it ends or idles out.
func (s *Server) acquireWebSocket() (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.webSockets >= s.cfg.MaxWebSocketSessions {
		s.metrics.WebSocketSessionRefused()
		return nil, fmt.Errorf("%d WebSocket exec, attach and port-forward sessions are open, the most --stream-max-websocket-sessions allows: retry once one ends, or use SPDY (kubectl through the API server, crictl without -r websocket), which is not counted", s.webSockets)
	}
	s.webSockets++
	ended := s.metrics.WebSocketSessionStarted()
	return func() {
		s.mu.Lock()
		s.webSockets--
		s.mu.Unlock()
		ended()
	}, nil
}

var (
	errNotUpgrade   = errors.New("not an upgrade request")
	errShuttingDown = errors.New("crishim is shutting down")
	// errCutAtShutdown ends a session still open at the shutdown timeout.
	errCutAtShutdown = errors.New("cut: crishim shut down (a restart or a stop) with the session open, at --shutdown-timeout")
)

// auditStart is the session's started event: who it reaches, what it runs.
func auditStart(kind Kind, req any, who audit.Event, remote string) audit.Event {
	ev := who
	ev.Kind = string(kind)
	ev.ClientAddress = remote
	switch r := req.(type) {
	case *runtimeapi.ExecRequest:
		ev.ContainerID, ev.Argv, ev.TTY, ev.Stdin = r.GetContainerId(), r.GetCmd(), r.GetTty(), r.GetStdin()
	case *runtimeapi.AttachRequest:
		ev.ContainerID, ev.TTY, ev.Stdin = r.GetContainerId(), r.GetTty(), r.GetStdin()
	case *runtimeapi.PortForwardRequest:
		ev.PodSandboxID, ev.Ports = r.GetPodSandboxId(), r.GetPort()
	}
	return ev
}

// auditEnd adds how the session went to its ended event.
func (sess *session) auditEnd(ev *audit.Event) {
	ev.BytesToRuntime = audit.Ptr(sess.toRuntime.Load())
	ev.BytesToClient = audit.Ptr(sess.toClient.Load())
	if sess.err != nil {
		ev.Error = sess.err.Error()
	} else if sess.shutdownCut.Load() {
		ev.Error = errCutAtShutdown.Error()
	}
	if code, ok := sess.exitCode(); ok {
		ev.ExitCode = audit.Ptr(code)
	}
	if sess.ports != nil && len(ev.Ports) == 0 {
		sess.tap.wait()
		ev.Ports = sess.ports.list()
	}
	if sess.rec != nil {
		ev.Recording = sess.rec.path
	}
}

// withTarget names what the stream reaches, for the log (never for metrics).
func withTarget(log *slog.Logger, req any) *slog.Logger {
	switch r := req.(type) {
	case *runtimeapi.ExecRequest:
		return log.With("container_id", r.GetContainerId(), "tty", r.GetTty())
	case *runtimeapi.AttachRequest:
		return log.With("container_id", r.GetContainerId(), "tty", r.GetTty())
	case *runtimeapi.PortForwardRequest:
		return log.With("pod_sandbox_id", r.GetPodSandboxId(), "ports", r.GetPort())
	}
	return log
}

// runtimeURL forwards the stored request to the runtime. Its URL is asked
// for only now because it is single use and short lived too: crishim's TTL
// is the only one the client sees.
func (s *Server) runtimeURL(ctx context.Context, req any) (*url.URL, error) {
	ctx, cancel := context.WithTimeout(ctx, runtimeCallTimeout)
	defer cancel()
	var raw string
	switch r := req.(type) {
	case *runtimeapi.ExecRequest:
		resp, err := s.runtime.Exec(ctx, r)
		if err != nil {
			return nil, err
		}
		raw = resp.GetUrl()
	case *runtimeapi.AttachRequest:
		resp, err := s.runtime.Attach(ctx, r)
		if err != nil {
			return nil, err
		}
		raw = resp.GetUrl()
	case *runtimeapi.PortForwardRequest:
		resp, err := s.runtime.PortForward(ctx, r)
		if err != nil {
			return nil, err
		}
		raw = resp.GetUrl()
	default:
		return nil, status.Errorf(codes.Internal, "streaming: stored request of type %T", req)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, status.Errorf(codes.Internal, "runtime answered stream URL %q: want an absolute http or https URL", raw)
	}
	return u, nil
}

// writeError answers a failed runtime call with the HTTP statuses
// k8s.io/cri-streaming gives clients for the same gRPC codes.
func (s *Server) writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch status.Code(err) {
	case codes.NotFound:
		code = http.StatusNotFound
	case codes.ResourceExhausted:
		// The runtime's tokens are gone within its TTL; crishim's is the
		// best estimate it has.
		w.Header().Set("Retry-After", strconv.Itoa(int((s.cfg.TokenTTL+time.Second-1)/time.Second)))
		code = http.StatusTooManyRequests
	case codes.Unavailable:
		code = http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		code = http.StatusGatewayTimeout
	}
	http.Error(w, err.Error(), code)
}

// upgradeResponder reports failures to reach the runtime's stream before
// the client's connection is hijacked.
type upgradeResponder struct {
	log  *slog.Logger
	sess *session
}

func (r upgradeResponder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	r.sess.err = err
	r.log.Warn("stream to the runtime failed", "err", err)
	http.Error(w, "crishim: runtime stream: "+err.Error(), http.StatusBadGateway)
}

// session is one stream being proxied. It holds both of its connections so
// that a shutdown can cut them: the upgrade-aware proxy stops copying only
// when one side closes.
type session struct {
	kind   Kind
	ctx    context.Context
	cancel context.CancelFunc
	m      *metrics.StreamSession
	start  time.Time
	err    error

	toRuntime, toClient atomic.Int64

	// tap, when set, sees the bytes of both directions (an audited exec:
	// its exit code; a recorded session). nil keeps the copy in the kernel.
	tap  *spdyTap
	exit *exitStatus
	rec  *recording
	// ports are those an audited port-forward's client opened streams
	// to, read from its SPDY (its CRI request names none).
	ports *portsSeen
	// exited is the exit code of a translated (WebSocket) exec, which
	// crishim reads from its own SPDY client rather than from a tap.
	exited atomic.Pointer[int32]

	// translated: crishim serves the client's WebSocket itself (exec,
	// attach) and is the runtime's SPDY client.
	translated bool

	mu sync.Mutex
	// clientConns and runtimeConns are the session's connections, closed
	// by a cut; runtimeConns alone by a cut of the runtime's side.
	clientConns, runtimeConns []net.Conn
	isCut                     bool
	runtimeCut                bool
	// shutdownCut: crishim's shutdown ended the session at its timeout,
	// not the command or the client; the ended event says so.
	shutdownCut atomic.Bool
	// tappedToClient: the runtime's bytes go to the client through the
	// tap's parse (countingConn.copy), which can stop at a frame's end
	// and tell the client why its session ends (shutdownend.go).
	tappedToClient bool
	// telling: the shutdown stopped the copy to the client to tell it.
	telling bool
	// head is the runtime's upgrade response as the proxy read it (a
	// tapped SPDY session), for its protocol version; headFull says it
	// ran over headMax and is not kept whole.
	head     []byte
	headFull bool
	// clientEnded is closed once the copy from the client ended: the
	// client closed, or its connection failed.
	clientEnded     chan struct{}
	clientEndedOnce sync.Once
	// copies counts countingConn's ReadFrom and WriteTo running. Not a
	// WaitGroup: a copy may start while the handler already waits, which
	// a WaitGroup forbids (it panics).
	copies     int
	copiesDone *sync.Cond
}

// open registers a session, unless the server is shutting down.
func (s *Server) open(kind Kind, r *http.Request) (*session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, false
	}
	ctx, cancel := context.WithCancel(r.Context())
	sess := &session{kind: kind, ctx: ctx, cancel: cancel, m: s.metrics.SessionStarted(string(kind)), start: time.Now(),
		translated: kind != PortForward && isWebSocket(r), clientEnded: make(chan struct{})}
	s.live[sess] = struct{}{}
	s.sessions.Add(1)
	return sess, true
}

func (s *Server) finish(sess *session) {
	sess.cut() // the proxy closed both already; this only makes sure
	sess.m.End()
	s.mu.Lock()
	delete(s.live, sess)
	s.mu.Unlock()
	s.sessions.Done()
}

// track keeps a connection to close on cut, the client's or the
// runtime's; one arriving after its side was cut is closed at once.
func (sess *session) track(c net.Conn, runtime bool) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.isCut || (runtime && sess.runtimeCut) {
		_ = c.Close()
		return
	}
	if runtime {
		sess.runtimeConns = append(sess.runtimeConns, c)
	} else {
		sess.clientConns = append(sess.clientConns, c)
	}
}

func (sess *session) cut() {
	sess.cancel()
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.cutLocked()
}

func (sess *session) cutLocked() {
	sess.isCut = true
	for _, conns := range [][]net.Conn{sess.clientConns, sess.runtimeConns} {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	sess.clientConns, sess.runtimeConns = nil, nil
}

// endAtShutdown ends the session at the shutdown timeout, telling its
// client why where the protocol lets crishim: a translated session loses
// its runtime's side, and the translation writes the client its status
// and closes; a tapped SPDY session's copy to the client stops, and
// writes the client a status if it stopped at a frame's end (tellClient).
// Any other is cut, both sides. Shutdown cuts what is left tellWait later.
func (sess *session) endAtShutdown() {
	sess.shutdownCut.Store(true)
	sess.mu.Lock()
	defer sess.mu.Unlock()
	switch {
	case sess.isCut:
	case sess.translated:
		sess.cancel()
		sess.runtimeCut = true
		for _, c := range sess.runtimeConns {
			_ = c.Close()
		}
		sess.runtimeConns = nil
	case sess.tappedToClient:
		sess.telling = true
		// The copy's read returns; nothing is lost, the runtime's
		// bytes not read yet are never sent.
		for _, c := range sess.runtimeConns {
			_ = c.SetReadDeadline(time.Now())
		}
	default:
		sess.cancel()
		sess.cutLocked()
	}
}

// runtimeTransport reaches the runtime's stream server as the kubelet
// does: verified, never h2; through dial, so counted and cut with the
// session.
func (sess *session) runtimeTransport() *http.Transport {
	return &http.Transport{
		DialContext:     sess.dial,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
	}
}

// dial opens the connection to the runtime's stream server, counting the
// bytes both ways.
func (sess *session) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("dial runtime stream server %s: %w", addr, err)
	}
	cc := &countingConn{Conn: c, sess: sess}
	sess.track(cc, true)
	return cc, nil
}

// countingConn is the runtime side of a stream: what is written to it came
// from the client, what is read from it goes to the client.
//
// Its ReadFrom and WriteTo keep the copy between the two TCP connections
// in the kernel: io.Copy, as the upgrade-aware proxy calls it, reaches them
// (a plain wrapper would hide *net.TCPConn and cost a read and a write
// through user space per 32 KiB).
type countingConn struct {
	net.Conn
	sess *session
}

// countChunk bounds each copy handed to net, so that the counts move
// during a long stream rather than only at its end. One splice(2) moves at
// most 1 MiB anyway.
const countChunk = 1 << 20

// Read is the proxy's read of the runtime's upgrade response (the copy
// that follows reads c.Conn), or a translated session's SPDY client's.
func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.countToClient(int64(n))
	if c.sess.tap != nil && !c.sess.translated && c.sess.kind != PortForward {
		c.sess.keepHead(p[:n])
	}
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.countToRuntime(int64(n))
	return n, err
}

func (sess *session) copyStarted() {
	sess.mu.Lock()
	sess.copies++
	sess.mu.Unlock()
}

func (sess *session) copyEnded() {
	sess.mu.Lock()
	sess.copies--
	if sess.copies == 0 && sess.copiesDone != nil {
		sess.copiesDone.Broadcast()
	}
	sess.mu.Unlock()
}

// tapStreams parses the session's SPDY when it is recorded, or the exit
// code or the ports are audited; otherwise the copy stays in the kernel.
func (sess *session) tapStreams(rec *recording, exit, ports bool, r *http.Request) {
	sess.rec = rec
	if !isSPDY(r) {
		return
	}
	if ports {
		sess.tapPorts(true) // port-forward is never recorded, has no exit code
		return
	}
	var sinks []streamSink
	if exit {
		sess.exit = &exitStatus{}
		sinks = append(sinks, sess.exit)
	}
	if rec != nil {
		sinks = append(sinks, rec)
	}
	sess.tap = newSPDYTap(r, sinks...)
}

// tapPorts parses a tunnelled port-forward's SPDY for its ports, when
// audited.
func (sess *session) tapPorts(audited bool) {
	if audited {
		sess.ports = &portsSeen{}
		sess.tap = newTap(sess.ports)
		sess.tap.headersOnly = true
	}
}

// exitCode is the exec's exit code, when its streams said it; read once
// both directions ended.
func (sess *session) exitCode() (int32, bool) {
	if code := sess.exited.Load(); code != nil {
		return *code, sess.kind == Exec
	}
	if sess.tap == nil || sess.exit == nil {
		return 0, false
	}
	sess.tap.wait()
	return parseExitStatus(sess.exit.status)
}

// setExit keeps a translated session's exit code.
func (sess *session) setExit(code int32) { sess.exited.Store(&code) }

// waitCopies waits for the copies running now; the connections are closed,
// so they are at their end.
func (sess *session) waitCopies() {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.copiesDone == nil {
		sess.copiesDone = sync.NewCond(&sess.mu)
	}
	for sess.copies > 0 {
		sess.copiesDone.Wait()
	}
}

// ReadFrom copies from the client to the runtime.
func (c *countingConn) ReadFrom(r io.Reader) (int64, error) {
	return c.copy(c.Conn, r, c.countToRuntime, true)
}

// WriteTo copies from the runtime to the client.
func (c *countingConn) WriteTo(w io.Writer) (int64, error) {
	return c.copy(w, c.Conn, c.countToClient, false)
}

// copy is both directions of the stream: in the kernel with spliceCounted
// when both ends are sockets, through net's own splice where only the
// destination can take it, else through a buffer (a *tls.Conn).
func (c *countingConn) copy(dst io.Writer, src io.Reader, count func(int64), toRuntime bool) (int64, error) {
	c.sess.copyStarted()
	defer c.sess.copyEnded()
	if toRuntime {
		defer c.sess.clientEndedOnce.Do(func() { close(c.sess.clientEnded) })
	}
	if c.sess.tap != nil {
		tw, end := c.sess.tap.writer(toRuntime)
		if !toRuntime {
			c.sess.mu.Lock()
			c.sess.tappedToClient = true
			c.sess.mu.Unlock()
		}
		// Through a buffer: what reaches dst is then parsed, whole.
		r := io.TeeReader(src, tw)
		var frames *frameTrack
		if !toRuntime {
			frames = &frameTrack{}
			r = io.TeeReader(r, frames)
		}
		n, err := io.Copy(countingWriter{dst, count}, r)
		if !toRuntime && errors.Is(err, os.ErrDeadlineExceeded) && c.sess.isTelling() {
			// Stopped for the shutdown, maybe inside a frame: pass the
			// rest of it (Shutdown's cut bounds the wait), then tell.
			_ = c.Conn.SetReadDeadline(time.Time{})
			err = nil
			for left := frames.left(); left > 0 && err == nil; left = frames.left() {
				var m int64
				m, err = io.CopyN(countingWriter{dst, count}, r, left)
				n += m
			}
			end()
			if err == nil {
				// The copy ends here, as meant: nothing for the proxy
				// to log.
				c.sess.tellClient(countingWriter{dst, count})
			}
			return n, err
		}
		end()
		return n, err
	}
	if n, err, ok := spliceCounted(dst, src, count); ok {
		return n, err
	}
	if rf, ok := dst.(io.ReaderFrom); ok {
		return copyCounted(rf, src, count)
	}
	return io.Copy(countingWriter{dst, count}, src)
}

func (c *countingConn) countToClient(n int64) {
	if n > 0 {
		c.sess.toClient.Add(n)
		c.sess.m.ToClient(int(n))
	}
}

func (c *countingConn) countToRuntime(n int64) {
	if n > 0 {
		c.sess.toRuntime.Add(n)
		c.sess.m.ToRuntime(int(n))
	}
}

// copyCounted copies src to dst until EOF or an error, countChunk bytes
// at a time, counting each chunk. The chunk is an *io.LimitedReader over
// src itself: net splices from that, and from nothing wrapping src.
func copyCounted(dst io.ReaderFrom, src io.Reader, count func(int64)) (int64, error) {
	var total int64
	for {
		lr := &io.LimitedReader{R: src, N: countChunk}
		n, err := dst.ReadFrom(lr)
		total += n
		count(n)
		if err != nil || lr.N > 0 { // short of the limit: src is at EOF
			return total, err
		}
	}
}

// countingWriter counts what a buffered copy wrote.
type countingWriter struct {
	w     io.Writer
	count func(int64)
}

func (cw countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.count(int64(n))
	return n, err
}

// hijackRecorder hands the upgrade-aware proxy the client's connection and
// keeps it in the session, so a cut reaches a client that stopped reading.
type hijackRecorder struct {
	http.ResponseWriter
	sess *session
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err == nil {
		h.sess.track(c, false)
	}
	return c, rw, err
}
