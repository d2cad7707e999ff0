package streaming

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rcconst "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/tools/remotecommand"
	clientspdy "k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream/spdy"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// The WebSocket remotecommand protocols crishim serves itself. v5 is the
// API server's (client-go's NewWebSocketExecutor, crictl -r websocket ask
// for it alone) and no runtime serves it; the older ones are what runtimes
// serve, kept so that a client choosing them sees no change. As at the
// kubelet, the first the client offers that is served is chosen.
const (
	wsV5       = rcconst.StreamProtocolV5Name
	wsV4       = rcconst.StreamProtocolV4Name
	wsV4Base64 = "v4.base64.channel.k8s.io"
	wsV1       = wsstream.ChannelWebSocketProtocol
	wsV1Base64 = wsstream.Base64ChannelWebSocketProtocol
)

var wsProtocols = []string{wsV5, wsV4, wsV4Base64, wsV1, wsV1Base64}

// wsWriteWait bounds writing the final status to a client that stopped
// reading, as the API server's.
const wsWriteWait = 10 * time.Second

// wsCloseWait bounds waiting for the client's close once crishim closed
// its side: a client reading slowly gets everything, one that never
// closes is cut.
const wsCloseWait = 10 * time.Second

// isWebSocket reports an upgrade to WebSocket (exec and attach are served
// by translate; port-forward is passed through, or tunnelled).
func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// wsServed says whether crishim serves one of the subprotocols r offers
// (or r offers none: binary, as channel.k8s.io).
func wsServed(r *http.Request) bool {
	offered := websocket.Subprotocols(r)
	if len(offered) == 0 {
		return true
	}
	for _, o := range offered {
		for _, p := range wsProtocols {
			if o == p {
				return true
			}
		}
	}
	return false
}

// streamOpts are the streams a stored exec or attach asked for; the
// runtime expects exactly these.
type streamOpts struct {
	stdin, stdout, stderr, tty bool
}

func optsOf(req any) streamOpts {
	switch r := req.(type) {
	case *runtimeapi.ExecRequest:
		return streamOpts{r.GetStdin(), r.GetStdout(), r.GetStderr(), r.GetTty()}
	case *runtimeapi.AttachRequest:
		return streamOpts{r.GetStdin(), r.GetStdout(), r.GetStderr(), r.GetTty()}
	}
	return streamOpts{}
}

// channelProtocols are wsstream's channels for opts under every protocol
// crishim serves: the streams asked for, the error channel always, the
// resize channel with a TTY. A channel not asked for drops what comes.
func channelProtocols(o streamOpts) map[string]wsstream.ChannelProtocolConfig {
	pick := func(on bool, t wsstream.ChannelType) wsstream.ChannelType {
		if on {
			return t
		}
		return wsstream.IgnoreChannel
	}
	ch := make([]wsstream.ChannelType, rcconst.StreamResize+1)
	ch[rcconst.StreamStdIn] = pick(o.stdin, wsstream.ReadChannel)
	ch[rcconst.StreamStdOut] = pick(o.stdout, wsstream.WriteChannel)
	ch[rcconst.StreamStdErr] = pick(o.stderr, wsstream.WriteChannel)
	ch[rcconst.StreamErr] = wsstream.WriteChannel
	ch[rcconst.StreamResize] = pick(o.tty, wsstream.ReadChannel)
	p := wsstream.NewDefaultChannelProtocols(ch) // "", channel.k8s.io, base64.channel.k8s.io
	p[wsV4] = wsstream.ChannelProtocolConfig{Binary: true, Channels: ch}
	p[wsV4Base64] = wsstream.ChannelProtocolConfig{Binary: false, Channels: ch}
	p[wsV5] = wsstream.ChannelProtocolConfig{Binary: true, Channels: ch} // wsstream honours its close
	return p
}

// translate serves a WebSocket exec or attach itself and runs it on the
// runtime over SPDY, as kube-apiserver's stream translator does for
// kubectl: runtimes serve no v5, so a v5 client (crictl -r websocket,
// client-go's WebSocket executor) could not be passed through; and
// crishim then holds each stream's data decoded, so it records the session
// and knows its exit code without parsing frames. The WebSocket side is
// k8s.io/streaming's wsstream, the kubelet's and the API server's.
func (s *Server) translate(w http.ResponseWriter, r *http.Request, sess *session, loc *url.URL, req any, sinks []streamSink, log *slog.Logger) {
	if !wsServed(r) {
		sess.err = fmt.Errorf("WebSocket subprotocols %q: crishim serves %s", websocket.Subprotocols(r), strings.Join(wsProtocols, ", "))
		http.Error(w, "crishim: "+sess.err.Error(), http.StatusBadRequest)
		return
	}
	opts := optsOf(req)
	ws := wsstream.NewConn(channelProtocols(opts))
	ws.SetIdleTimeout(s.cfg.IdleTimeout)
	hj := &wsHijacker{ResponseWriter: w, sess: sess}
	proto, streams, err := ws.Open(hj, r.WithContext(klog.NewContext(r.Context(), proxyLogger(log))))
	if err != nil {
		// Answered by the WebSocket server (400, a bad handshake).
		sess.err = fmt.Errorf("WebSocket upgrade: %w", err)
		return
	}
	t := &translation{ws: ws, conn: hj.conn, proto: proto, streams: streams, sinks: sinks, opts: opts, log: log, streamed: s.streamed}
	t.run(sess, s.spdyExecutor(sess, loc))
}

// spdyExecutor is the runtime side of a translated session: SPDY, dialled
// as the proxied sessions are (counted, cut with the session).
func (s *Server) spdyExecutor(sess *session, loc *url.URL) func() (remotecommand.Executor, error) {
	return func() (remotecommand.Executor, error) {
		rt, err := spdy.NewRoundTripperWithConfig(spdy.RoundTripperConfig{UpgradeTransport: sess.runtimeTransport(), PingPeriod: 5 * time.Second})
		if err != nil {
			return nil, fmt.Errorf("SPDY round tripper: %w", err)
		}
		return remotecommand.NewSPDYExecutorRejectRedirects(rt, clientspdy.NewUpgraderForStreaming(rt), http.MethodPost, loc)
	}
}

// translation is one WebSocket session served by translate.
type translation struct {
	ws      *wsstream.Conn
	conn    *wsConn
	proto   string
	streams []io.ReadWriteCloser // by channel
	opts    streamOpts
	log     *slog.Logger
	// streamed, when set, is told the runtime's side ended (tests).
	streamed func()

	smu   sync.Mutex // the sinks are called one at a time
	sinks []streamSink
}

// run streams the session until the runtime's side ends, then tells the
// client how it ended and closes as the API server does.
func (t *translation) run(sess *session, newExecutor func() (remotecommand.Executor, error)) {
	// The runtimes' servers say the session is open with an empty
	// message on the lowest channel the client reads; clients wait for
	// nothing else.
	switch {
	case t.opts.stdout:
		_, _ = t.streams[rcconst.StreamStdOut].Write(nil)
	case t.opts.stderr:
		_, _ = t.streams[rcconst.StreamStdErr].Write(nil)
	default:
		_, _ = t.streams[rcconst.StreamErr].Write(nil)
	}
	// A client gone (its close, its connection, the idle timeout) ends
	// the runtime's side too, as a proxied session's closed connection
	// does, even for a command that neither reads nor writes.
	ctx, clientGone := context.WithCancel(sess.ctx)
	defer clientGone()
	stopWatch := context.AfterFunc(t.conn.goneCtx, clientGone)
	defer stopWatch()

	var opts remotecommand.StreamOptions
	if t.opts.stdin {
		opts.Stdin = io.TeeReader(t.streams[rcconst.StreamStdIn], sinkWriter{t, "stdin"})
	}
	if t.opts.stdout {
		opts.Stdout = wsWriter{t, t.streams[rcconst.StreamStdOut], "stdout"}
	}
	if t.opts.stderr {
		opts.Stderr = wsWriter{t, t.streams[rcconst.StreamStdErr], "stderr"}
	}
	var resizes sync.WaitGroup
	if t.opts.tty {
		sizes := &sizeQueue{ch: make(chan remotecommand.TerminalSize, 1), done: make(chan struct{})}
		opts.Tty = true
		opts.TerminalSizeQueue = sizes
		resizes.Add(1)
		go func() {
			defer resizes.Done()
			t.readResizes(t.streams[rcconst.StreamResize], sizes)
		}()
		defer close(sizes.done)
	}
	exec, err := newExecutor()
	if err == nil {
		err = exec.StreamWithContext(ctx, opts)
	}
	if t.streamed != nil {
		t.streamed()
	}
	st, tell := t.result(sess, err, ctx.Err() != nil && sess.ctx.Err() == nil)
	if tell {
		t.ws.SetWriteDeadline(wsWriteWait)
		t.writeStatus(st)
	}
	// The close frame, a half-close, then the client's close (bounded):
	// closing at once would reset a connection whose client still sends,
	// and a client reading more slowly than crishim wrote would lose the
	// end of its output and the status.
	t.conn.ending()
	_ = t.ws.Close()
	resizes.Wait()
}

// result is the status the client is told, and what the session's audit
// events say: the exit code, or why the session failed. tell is false when
// the client went away (clientGone), which is how sessions normally end,
// not a failure, and leaves nobody to tell.
func (t *translation) result(sess *session, err error, clientGone bool) (st metav1.Status, tell bool) {
	var exitErr utilexec.ExitError
	switch {
	case err == nil:
		sess.setExit(0)
		return metav1.Status{Status: metav1.StatusSuccess}, true
	case errors.As(err, &exitErr) && exitErr.Exited():
		code := exitErr.ExitStatus()
		sess.setExit(int32(code))
		return metav1.Status{
			Status:  metav1.StatusFailure,
			Reason:  rcconst.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with exit code %d", code),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{
				Type:    rcconst.ExitCodeCauseType,
				Message: strconv.Itoa(code),
			}}},
		}, true
	case sess.shutdownCut.Load():
		// The audit event says errCutAtShutdown; the client is told.
		t.log.Debug("runtime's side cut at the shutdown; telling the client", "err", err)
		return shutdownStatus(), true
	case clientGone:
		t.log.Debug("client gone; the runtime's side closed", "err", err)
		return metav1.Status{}, false
	}
	sess.err = fmt.Errorf("runtime stream: %w", err)
	t.log.Warn("stream to the runtime failed", "err", err)
	return metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonInternalError, Message: sess.err.Error(), Code: http.StatusInternalServerError}, true
}

// writeStatus ends the error channel as the runtimes do: a metav1.Status
// in JSON from v4 on, the error's text (nothing on success) before.
func (t *translation) writeStatus(st metav1.Status) {
	errc := t.streams[rcconst.StreamErr]
	switch t.proto {
	case wsV5, wsV4, wsV4Base64:
		b, err := json.Marshal(st)
		if err == nil {
			_, _ = errc.Write(b)
		}
	default:
		if st.Status != metav1.StatusSuccess {
			_, _ = errc.Write([]byte(st.Message))
		}
	}
}

// deliver hands a stream's data to the sinks (the recording).
func (t *translation) deliver(typ string, p []byte) {
	if len(t.sinks) == 0 || len(p) == 0 {
		return
	}
	t.smu.Lock()
	defer t.smu.Unlock()
	for _, s := range t.sinks {
		s.data(typ, p)
	}
}

// wsWriter is the client's stdout or stderr.
type wsWriter struct {
	t   *translation
	w   io.Writer
	typ string
}

func (w wsWriter) Write(p []byte) (int, error) {
	w.t.deliver(w.typ, p)
	return w.w.Write(p)
}

// sinkWriter hands what passes to the sinks.
type sinkWriter struct {
	t   *translation
	typ string
}

func (w sinkWriter) Write(p []byte) (int, error) {
	w.t.deliver(w.typ, p)
	return len(p), nil
}

// readResizes reads the resize channel, TerminalSizes in JSON one after
// the other, until it closes. A size larger than resizeMax stops the
// reading; what follows is drained, so the client's other channels never
// wait on it.
func (t *translation) readResizes(r io.Reader, sizes *sizeQueue) {
	defer func() { _, _ = io.Copy(io.Discard, r) }()
	lr := &pendingLimit{r: r}
	dec := json.NewDecoder(lr)
	for {
		lr.pending = lr.read - dec.InputOffset()
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return
		}
		var size remotecommand.TerminalSize
		if json.Unmarshal(raw, &size) != nil || size.Width == 0 || size.Height == 0 {
			continue
		}
		sizes.put(size)
		// The recording reads resizes as JSON lines.
		t.deliver("resize", append(bytes.TrimSpace(raw), '\n'))
	}
}

// pendingLimit fails a read once more than resizeMax bytes were read
// without the decoder finishing a value: the decoder would buffer them all.
type pendingLimit struct {
	r             io.Reader
	read, pending int64
}

func (l *pendingLimit) Read(p []byte) (int, error) {
	if l.pending > resizeMax {
		return 0, errResizeTooLarge
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	l.pending += int64(n)
	return n, err
}

var errResizeTooLarge = fmt.Errorf("terminal size over %d bytes", resizeMax)

// sizeQueue hands the client's terminal sizes to the runtime's side, the
// newest only: sizes are states, not events to replay.
type sizeQueue struct {
	ch   chan remotecommand.TerminalSize
	done chan struct{}
}

func (q *sizeQueue) put(size remotecommand.TerminalSize) {
	for {
		select {
		case q.ch <- size:
			return
		default:
		}
		select {
		case <-q.ch: // replaced by the newer size
		default:
		}
	}
}

// Next is remotecommand.TerminalSizeQueue's: nil once the session ended.
func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	select {
	case size := <-q.ch:
		return &size
	case <-q.done:
		return nil
	}
}

// upgradeWebSocket upgrades a tunnelled port-forward's request to a
// WebSocket speaking protocol; a failed upgrade is answered, and recorded
// as the session's error.
func upgradeWebSocket(w http.ResponseWriter, r *http.Request, sess *session, protocol string) (*websocket.Conn, error) {
	up := websocket.Upgrader{
		Subprotocols: []string{protocol},
		// The token is the authorization, as at the runtimes, whose
		// WebSocket servers check no origin either.
		CheckOrigin: func(*http.Request) bool { return true },
		Error: func(w http.ResponseWriter, _ *http.Request, code int, reason error) {
			sess.err = fmt.Errorf("WebSocket upgrade: %w", reason)
			http.Error(w, "crishim: "+sess.err.Error(), code)
		},
	}
	return up.Upgrade(&hijackRecorder{ResponseWriter: w, sess: sess}, r, nil)
}
