package streaming

import (
	"bytes"
	"context"
	"encoding/base64"
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
	"k8s.io/streaming/pkg/httpstream/spdy"
)

// The WebSocket remotecommand protocols crishim serves itself, best first.
// v5 is the API server's (client-go's NewWebSocketExecutor, crictl -r
// websocket ask for it alone) and no runtime serves it; the older ones are
// what runtimes serve, kept so that a client choosing them sees no change.
const (
	wsV5       = "v5.channel.k8s.io"
	wsV4       = "v4.channel.k8s.io"
	wsV4Base64 = "v4.base64.channel.k8s.io"
	wsV1       = "channel.k8s.io"
	wsV1Base64 = "base64.channel.k8s.io"
)

var wsProtocols = []string{wsV5, wsV4, wsV4Base64, wsV1, wsV1Base64}

// remotecommand's channels: the first byte of every message.
const (
	chStdin  = 0
	chStdout = 1
	chStderr = 2
	chError  = 3
	chResize = 4
	// chClose (v5) is followed by the channel the client closes: stdin's
	// end of file, which no older protocol can say.
	chClose = 255
)

// wsReadLimit bounds a message from the client. Messages are streamed,
// never held whole, so this only refuses what no client sends: client-go
// writes stdin in 32 KiB reads.
const wsReadLimit = 1 << 20

// wsWriteWait bounds writing the final status and close to a client that
// stopped reading.
const wsWriteWait = 10 * time.Second

// isWebSocket reports an upgrade to WebSocket (exec and attach are served
// by translate; port-forward is passed through, or tunnelled).
func isWebSocket(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

// wsProtocol picks the remotecommand protocol of a WebSocket request: the
// best the client offers, "" (binary, as channel.k8s.io) when it offers
// none; false when it offers only ones crishim does not serve.
func wsProtocol(r *http.Request) (string, bool) {
	offered := websocket.Subprotocols(r)
	if len(offered) == 0 {
		return "", true
	}
	for _, p := range wsProtocols {
		for _, o := range offered {
			if o == p {
				return p, true
			}
		}
	}
	return "", false
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

// translate serves a WebSocket exec or attach itself and runs it on the
// runtime over SPDY, as kube-apiserver's stream translator does for
// kubectl: runtimes serve no v5, so a v5 client (crictl -r websocket,
// client-go's WebSocket executor) could not be passed through; and
// crishim then holds each stream's data decoded, so it records the session
// and knows its exit code without parsing frames. The session's bytes go
// through crishim's memory, never more than a copy buffer and a message
// being written at a time.
func (s *Server) translate(w http.ResponseWriter, r *http.Request, sess *session, loc *url.URL, req any, sinks []streamSink, log *slog.Logger) {
	proto, ok := wsProtocol(r)
	if !ok {
		sess.err = fmt.Errorf("WebSocket subprotocols %q: crishim serves %s", websocket.Subprotocols(r), strings.Join(wsProtocols, ", "))
		http.Error(w, "crishim: "+sess.err.Error(), http.StatusBadRequest)
		return
	}
	conn, err := upgradeWebSocket(w, r, sess, wsProtocols...)
	if err != nil {
		return // answered by the upgrader
	}
	defer conn.Close()
	conn.SetReadLimit(wsReadLimit)
	t := &translation{conn: conn, proto: proto, sinks: sinks, opts: optsOf(req), log: log}
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
	conn  *websocket.Conn
	proto string
	opts  streamOpts
	log   *slog.Logger

	wmu sync.Mutex // one message written at a time

	smu   sync.Mutex // the sinks are called one at a time
	sinks []streamSink
}

func (t *translation) base64() bool { return t.proto == wsV4Base64 || t.proto == wsV1Base64 }

// run streams the session until the runtime's side ends, then tells the
// client how it ended.
func (t *translation) run(sess *session, newExecutor func() (remotecommand.Executor, error)) {
	// The runtimes' servers say the session is open with an empty
	// message on the lowest channel the client reads; clients wait for
	// nothing else.
	switch {
	case t.opts.stdout:
		_ = t.write(chStdout, nil)
	case t.opts.stderr:
		_ = t.write(chStderr, nil)
	default:
		_ = t.write(chError, nil)
	}
	stdinR, stdinW := io.Pipe()
	sizes := &sizeQueue{ch: make(chan remotecommand.TerminalSize, 1), done: make(chan struct{})}
	// A client gone ends the runtime's side too, as a proxied session's
	// closed connection does, even for a command that neither reads nor
	// writes.
	ctx, clientGone := context.WithCancel(sess.ctx)
	defer clientGone()
	var reader sync.WaitGroup
	reader.Add(1)
	go func() {
		defer reader.Done()
		defer clientGone()
		t.readLoop(stdinW, sizes)
	}()
	defer func() {
		// The runtime's side ended: stop what still waits on the client.
		_ = stdinR.CloseWithError(io.ErrClosedPipe)
		close(sizes.done)
		_ = t.conn.Close()
		reader.Wait()
	}()

	var opts remotecommand.StreamOptions
	if t.opts.stdin {
		opts.Stdin = stdinR
	}
	if t.opts.stdout {
		opts.Stdout = wsWriter{t, chStdout, "stdout"}
	}
	if t.opts.stderr {
		opts.Stderr = wsWriter{t, chStderr, "stderr"}
	}
	if t.opts.tty {
		opts.Tty = true
		opts.TerminalSizeQueue = sizes
	}
	exec, err := newExecutor()
	if err == nil {
		err = exec.StreamWithContext(ctx, opts)
	}
	st, tell := t.result(sess, err, ctx.Err() != nil && sess.ctx.Err() == nil)
	if !tell {
		return
	}
	_ = t.conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
	t.writeStatus(st)
	t.wmu.Lock()
	_ = t.conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	t.wmu.Unlock()
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
		sess.setExit(int32(exitErr.ExitStatus()))
		return metav1.Status{
			Status:  metav1.StatusFailure,
			Reason:  rcconst.NonZeroExitCodeReason,
			Message: fmt.Sprintf("command terminated with non-zero exit code: %v", err),
			Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{
				Type:    rcconst.ExitCodeCauseType,
				Message: strconv.Itoa(exitErr.ExitStatus()),
			}}},
		}, true
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
	switch t.proto {
	case wsV5, wsV4, wsV4Base64:
		b, err := json.Marshal(st)
		if err == nil {
			_ = t.write(chError, b)
		}
	default:
		if st.Status != metav1.StatusSuccess {
			_ = t.write(chError, []byte(st.Message))
		}
	}
}

// write sends p on a channel, as one message.
func (t *translation) write(ch byte, p []byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.base64() {
		msg := make([]byte, 1+base64.StdEncoding.EncodedLen(len(p)))
		msg[0] = '0' + ch
		base64.StdEncoding.Encode(msg[1:], p)
		return t.conn.WriteMessage(websocket.TextMessage, msg)
	}
	w, err := t.conn.NextWriter(websocket.BinaryMessage)
	if err != nil {
		return err
	}
	if _, err := w.Write([]byte{ch}); err != nil {
		return err
	}
	if _, err := w.Write(p); err != nil {
		return err
	}
	return w.Close()
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
	ch  byte
	typ string
}

func (w wsWriter) Write(p []byte) (int, error) {
	w.t.deliver(w.typ, p)
	if err := w.t.write(w.ch, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// readLoop reads the client's messages until its connection ends: stdin
// into the pipe the runtime's side reads (so a client is held back by the
// runtime, never buffered), resizes into the size queue, v5's close.
// Control frames (ping, close) are answered by the websocket library
// while reading.
func (t *translation) readLoop(stdin *io.PipeWriter, sizes *sizeQueue) {
	defer func() { _ = stdin.Close() }() // the client is gone: stdin ends
	var ch [1]byte
	for {
		_, msg, err := t.conn.NextReader()
		if err != nil {
			return
		}
		if _, err := io.ReadFull(msg, ch[:]); err != nil {
			continue // an empty message
		}
		c := ch[0]
		if t.base64() {
			c -= '0'
			msg = base64.NewDecoder(base64.StdEncoding, msg)
		}
		switch {
		case c == chClose && t.proto == wsV5:
			if _, err := io.ReadFull(msg, ch[:]); err == nil && ch[0] == chStdin {
				_ = stdin.Close()
			}
		case c == chStdin && t.opts.stdin:
			// Copied as it comes: a message is never held whole.
			_, _ = io.Copy(stdin, io.TeeReader(msg, sinkWriter{t, "stdin"}))
		case c == chResize && t.opts.tty:
			t.resized(msg, sizes)
		}
	}
}

// resized reads one resize message, a TerminalSize in JSON, bounded.
func (t *translation) resized(msg io.Reader, sizes *sizeQueue) {
	b, err := io.ReadAll(io.LimitReader(msg, resizeMax+1))
	if err != nil || len(b) > resizeMax {
		return
	}
	var size remotecommand.TerminalSize
	if json.Unmarshal(b, &size) != nil || size.Width == 0 || size.Height == 0 {
		return
	}
	sizes.put(size)
	// The recording reads resizes as JSON lines.
	t.deliver("resize", append(bytes.TrimSpace(b), '\n'))
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

// upgradeWebSocket upgrades a session's request to a WebSocket speaking one
// of protocols; a failed upgrade is answered, and recorded as the session's
// error.
func upgradeWebSocket(w http.ResponseWriter, r *http.Request, sess *session, protocols ...string) (*websocket.Conn, error) {
	up := websocket.Upgrader{
		Subprotocols: protocols,
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
