package streaming

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rcconst "k8s.io/apimachinery/pkg/util/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criremotecommand "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/metrics"
)

// runtimeExec is a runtime's stream server as containerd and CRI-O run it
// (k8s.io/cri-streaming's ServeExec, SPDY), over a command played by the
// test: "exit N" writes "out" and "err" and exits N; "cat" copies stdin to
// stdout until its end; "wait" returns when the session is cut, "ready"
// too, having written "ready\n" to stdout; "flood" writes to stdout until
// its session is cut; "write N"
// writes N bytes to stdout and exits 0.
type runtimeExec struct {
	*httptest.Server
	opts    criremotecommand.Options
	cmd     []string
	started chan struct{} // each command's start
	ended   chan error    // each command's end
}

func newRuntimeExec(t *testing.T, cmd []string, opts criremotecommand.Options) *runtimeExec {
	r := &runtimeExec{opts: opts, cmd: cmd, started: make(chan struct{}, 4), ended: make(chan error, 4)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		o := r.opts
		criremotecommand.ServeExec(w, req, r, "pod", "uid", "c1", r.cmd, &o, time.Hour, time.Minute, rcconst.SupportedStreamingProtocols)
	}))
	t.Cleanup(r.Close)
	return r
}

var errCut = errors.New("session cut")

// waitEnded waits for a command's end, with a hang guard.
func (r *runtimeExec) waitEnded(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.ended:
		return err
	case <-time.After(2 * wsCloseWait):
		t.Fatal("the command has not ended")
		return nil
	}
}

func (r *runtimeExec) ExecInContainer(_ context.Context, _, _, _ string, cmd []string, in io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan criremotecommand.TerminalSize, _ time.Duration) (err error) {
	r.started <- struct{}{}
	defer func() { r.ended <- err }()
	switch cmd[0] {
	case "exit":
		code, _ := strconv.Atoi(cmd[1])
		_, _ = io.WriteString(out, "out")
		if errw != nil {
			_, _ = io.WriteString(errw, "err")
		}
		if code == 0 {
			return nil
		}
		return utilexec.CodeExitError{Err: fmt.Errorf("exit status %d", code), Code: code}
	case "cat":
		_, err := io.Copy(out, in)
		return err
	case "write":
		n, _ := strconv.Atoi(cmd[1])
		_, err := out.Write([]byte(strings.Repeat("x", n)))
		return err
	case "flood":
		// Output until the session is cut.
		chunk := []byte(strings.Repeat("y", 4<<10))
		for {
			if _, err := out.Write(chunk); err != nil {
				return errCut
			}
		}
	case "ready", "wait":
		if cmd[0] == "ready" {
			_, _ = io.WriteString(out, "ready\n") // the client's streams are all set up
		}
		// Until its session is cut: the runtime's stream server sees
		// its SPDY connection close (the request's context does not
		// end with a hijacked connection), and stdin with it.
		_, _ = io.Copy(io.Discard, in)
		return errCut
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// wsClient is a WebSocket remotecommand client speaking one subprotocol,
// byte by byte, so that the channel byte and the encoding are checked.
type wsClient struct {
	t      *testing.T
	c      *websocket.Conn
	proto  string
	base64 bool
}

func dialWS(t *testing.T, s *testServer, req any, proto string) (*wsClient, *http.Response, error) {
	t.Helper()
	kind := Exec
	if _, ok := req.(*runtimeapi.AttachRequest); ok {
		kind = Attach
	}
	u, err := s.Issue(kind, req)
	if err != nil {
		t.Fatal(err)
	}
	// One frame a message, as client-go's buffers make it: wsstream,
	// the kubelet's and API server's, reads each frame as a message.
	d := websocket.Dialer{WriteBufferSize: 2 * wsReadLimit}
	if proto != "" {
		d.Subprotocols = []string{proto}
	}
	c, resp, err := d.Dial("ws://"+s.Addr()+pathOf(t, u), nil)
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { _ = c.Close() })
	// A hang guard, not a measurement.
	_ = c.SetReadDeadline(time.Now().Add(2 * wsCloseWait))
	if c.Subprotocol() != proto {
		t.Fatalf("subprotocol %q, want %q", c.Subprotocol(), proto)
	}
	return &wsClient{t: t, c: c, proto: proto, base64: strings.Contains(proto, "base64")}, resp, nil
}

// send writes p on channel ch.
func (w *wsClient) send(ch byte, p []byte) {
	w.t.Helper()
	var err error
	if w.base64 {
		err = w.c.WriteMessage(websocket.TextMessage, append([]byte{'0' + ch}, base64.StdEncoding.EncodeToString(p)...))
	} else {
		err = w.c.WriteMessage(websocket.BinaryMessage, append([]byte{ch}, p...))
	}
	if err != nil {
		w.t.Fatal(err)
	}
}

// readAll reads until the server's close: the data of each channel, and
// the close frame's code (0: the connection ended without one).
func (w *wsClient) readAll() (chans map[byte]string, closeCode int) {
	w.t.Helper()
	chans = map[byte]string{}
	for {
		typ, msg, err := w.c.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return chans, ce.Code
			}
			w.t.Logf("read: %v", err)
			return chans, 0
		}
		if len(msg) == 0 {
			w.t.Fatal("an empty message")
		}
		ch, data := msg[0], msg[1:]
		if w.base64 {
			if typ != websocket.TextMessage {
				w.t.Fatalf("a base64 protocol's message of type %d", typ)
			}
			if ch < '0' {
				w.t.Fatalf("base64 channel byte %q", ch)
			}
			ch -= '0'
			b, err := base64.StdEncoding.DecodeString(string(data))
			if err != nil {
				w.t.Fatalf("channel %d: %q is not base64: %v", ch, data, err)
			}
			data = b
		} else if typ != websocket.BinaryMessage {
			w.t.Fatalf("a binary protocol's message of type %d", typ)
		}
		chans[ch] += string(data)
	}
}

// startWSServer is a streaming server whose runtime is rt, auditing to a
// file whose events endedEvent reads.
func startWSServer(t *testing.T, cfg Config, rt *runtimeExec) (*testServer, string) {
	t.Helper()
	return startWSServerWith(t, cfg, Deps{}, rt)
}

func startWSServerWith(t *testing.T, cfg Config, d Deps, rt *runtimeExec) (*testServer, string) {
	t.Helper()
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	l, err := audit.Open(audit.Config{Path: auditPath}, metrics.NewAudit(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	d.Audit = l
	s := startServerWith(t, cfg, d)
	s.rt.url = rt.URL
	return s, auditPath
}

// endedEvent waits for the session's ended audit event.
func endedEvent(t *testing.T, path string) audit.Event {
	t.Helper()
	var end audit.Event
	waitFor(t, "the session's ended event", func() bool {
		f, err := os.Open(path)
		if err != nil {
			return false
		}
		defer f.Close()
		evs, _ := audit.Decode(f)
		for _, ev := range evs {
			if ev.Stage == audit.StageEnded {
				end = ev
				return true
			}
		}
		return false
	})
	return end
}

// TestWebSocketSubprotocols: every subprotocol crishim serves delivers
// stdout and stderr on their channels, in its encoding, and the exit code:
// to the client on the error channel (a metav1.Status from v4 on, the
// message before) and to the audit log.
func TestWebSocketSubprotocols(t *testing.T) {
	for _, proto := range append(slicesClone(wsProtocols), "") {
		for _, code := range []int{0, 3} {
			t.Run(fmt.Sprintf("%q exit %d", proto, code), func(t *testing.T) {
				rt := newRuntimeExec(t, []string{"exit", strconv.Itoa(code)}, criremotecommand.Options{Stdout: true, Stderr: true})
				s, auditPath := startWSServer(t, testConfig(), rt)
				c, _, err := dialWS(t, s, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: rt.cmd, Stdout: true, Stderr: true}, proto)
				if err != nil {
					t.Fatalf("WebSocket session refused: %v", err)
				}
				chans, closeCode := c.readAll()
				if chans[rcconst.StreamStdOut] != "out" || chans[rcconst.StreamStdErr] != "err" {
					t.Errorf("stdout %q, stderr %q: want out, err", chans[rcconst.StreamStdOut], chans[rcconst.StreamStdErr])
				}
				if closeCode != websocket.CloseNormalClosure {
					t.Errorf("close code %d, want a normal closure", closeCode)
				}
				checkStatus(t, proto, chans[rcconst.StreamErr], code)
				end := endedEvent(t, auditPath)
				if end.ExitCode == nil || *end.ExitCode != int32(code) {
					t.Errorf("audited exit code %v, want %d", fmtCode(end.ExitCode), code)
				}
			})
		}
	}
}

// checkStatus checks the error channel as a client of proto reads it.
func checkStatus(t *testing.T, proto, errChan string, code int) {
	t.Helper()
	switch proto {
	case wsV5, wsV4, wsV4Base64:
		var st metav1.Status
		if err := json.Unmarshal([]byte(errChan), &st); err != nil {
			t.Fatalf("error channel %q: %v", errChan, err)
		}
		if code == 0 {
			if st.Status != metav1.StatusSuccess {
				t.Errorf("status %+v, want Success", st)
			}
			return
		}
		if st.Reason != rcconst.NonZeroExitCodeReason || st.Details == nil || len(st.Details.Causes) != 1 ||
			st.Details.Causes[0].Type != rcconst.ExitCodeCauseType || st.Details.Causes[0].Message != strconv.Itoa(code) {
			t.Errorf("status %+v: want NonZeroExitCode with cause ExitCode %d", st, code)
		}
		if want := fmt.Sprintf("command terminated with exit code %d", code); st.Message != want {
			t.Errorf("status message %q, want %q", st.Message, want)
		}
	default:
		want := ""
		if code != 0 {
			want = fmt.Sprintf("command terminated with exit code %d", code)
		}
		if errChan != want {
			t.Errorf("error channel %q, want %q", errChan, want)
		}
	}
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// TestWebSocketStdin: stdin reaches the command on every subprotocol
// (decoded from base64 where it is); v5's close signal ends it, so that
// cat ends by itself and exits 0.
func TestWebSocketStdin(t *testing.T) {
	for _, proto := range wsProtocols {
		t.Run(proto, func(t *testing.T) {
			rt := newRuntimeExec(t, []string{"cat"}, criremotecommand.Options{Stdin: true, Stdout: true})
			s, auditPath := startWSServer(t, testConfig(), rt)
			c, _, err := dialWS(t, s, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: rt.cmd, Stdin: true, Stdout: true}, proto)
			if err != nil {
				t.Fatalf("WebSocket session refused: %v", err)
			}
			c.send(rcconst.StreamStdIn, []byte("hello\n"))
			if proto == wsV5 {
				if err := c.c.WriteMessage(websocket.BinaryMessage, []byte{255, rcconst.StreamStdIn}); err != nil {
					t.Fatal(err)
				}
				chans, _ := c.readAll()
				if chans[rcconst.StreamStdOut] != "hello\n" {
					t.Errorf("stdout %q, want hello", chans[rcconst.StreamStdOut])
				}
				checkStatus(t, proto, chans[rcconst.StreamErr], 0)
				if end := endedEvent(t, auditPath); end.ExitCode == nil || *end.ExitCode != 0 {
					t.Errorf("audited exit code %v, want 0", fmtCode(end.ExitCode))
				}
				return
			}
			// Older protocols cannot end stdin but by leaving: read the
			// echo, then close.
			got := ""
			for got != "hello\n" {
				typ, msg, err := c.c.ReadMessage()
				if err != nil {
					t.Fatalf("after %q: %v", got, err)
				}
				if len(msg) > 1 {
					if c.base64 {
						b, _ := base64.StdEncoding.DecodeString(string(msg[1:]))
						msg = append([]byte{msg[0] - '0'}, b...)
					}
					if msg[0] != rcconst.StreamStdOut || (typ == websocket.TextMessage) != c.base64 {
						t.Fatalf("message %q of type %d", msg, typ)
					}
					got += string(msg[1:])
				}
			}
			_ = c.c.Close()
			if err := rt.waitEnded(t); err != nil {
				t.Logf("the command ended with %v once the client left", err)
			}
		})
	}
}

func fmtCode(p *int32) string {
	if p == nil {
		return "none"
	}
	return strconv.Itoa(int(*p))
}

// TestWebSocketSlowReaderGetsEverything: a client that starts reading only
// once crishim is done with the runtime, and sends meanwhile, still gets
// all of the output, the status and a normal close: crishim half-closes
// and waits for the client's close, where closing at once would reset the
// connection (the client's data unread, or arriving after the close) and
// drop what crishim had written but the client not yet read.
func TestWebSocketSlowReaderGetsEverything(t *testing.T) {
	const n = 1 << 20
	rt := newRuntimeExec(t, []string{"write", strconv.Itoa(n)}, criremotecommand.Options{Stdin: true, Stdout: true})
	streamed := make(chan struct{})
	s, _ := startWSServerWith(t, testConfig(), Deps{streamed: func() { close(streamed) }}, rt)
	c, _, err := dialWS(t, s, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: rt.cmd, Stdin: true, Stdout: true}, wsV5)
	if err != nil {
		t.Fatalf("WebSocket session refused: %v", err)
	}
	// crishim is done with the runtime (so stdin can no longer reach a
	// runtime that closed, which would reset that side instead).
	select {
	case <-streamed:
	case <-time.After(2 * wsCloseWait):
		t.Fatal("the runtime's side has not ended") // a hang guard
	}
	// Stdin nobody reads any more, until the connection fails.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		msg := append([]byte{rcconst.StreamStdIn}, make([]byte, 32<<10)...)
		for c.c.WriteMessage(websocket.BinaryMessage, msg) == nil {
		}
	}()
	chans, closeCode := c.readAll()
	_ = c.c.Close()
	wg.Wait()
	if got := len(chans[rcconst.StreamStdOut]); got != n {
		t.Errorf("stdout: %d bytes, want %d", got, n)
	}
	checkStatus(t, wsV5, chans[rcconst.StreamErr], 0)
	if closeCode != websocket.CloseNormalClosure {
		t.Errorf("close code %d, want a normal closure", closeCode)
	}
}

// TestWebSocketIdleTimeout: a session with no message either way for
// --stream-idle-timeout ends, both sides: crishim's pings to the runtime
// would otherwise keep it open for ever.
func TestWebSocketIdleTimeout(t *testing.T) {
	rt := newRuntimeExec(t, []string{"wait"}, criremotecommand.Options{Stdin: true, Stdout: true})
	cfg := testConfig()
	cfg.IdleTimeout = 100 * time.Millisecond
	s, auditPath := startWSServer(t, cfg, rt)
	c, _, err := dialWS(t, s, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: rt.cmd, Stdin: true, Stdout: true}, wsV5)
	if err != nil {
		t.Fatalf("WebSocket session refused: %v", err)
	}
	chans, _ := c.readAll()
	if err := rt.waitEnded(t); !errors.Is(err, errCut) {
		t.Errorf("the command ended with %v, want its session cut", err)
	}
	if chans[rcconst.StreamErr] != "" {
		t.Errorf("status %q told to a client that timed out", chans[rcconst.StreamErr])
	}
	endedEvent(t, auditPath)
}

// TestWebSocketSessionLimit: past --stream-max-websocket-sessions a
// WebSocket session is refused with 429 and a message saying what to do,
// counted; SPDY sessions are not counted, and a session that ended frees
// its place.
func TestWebSocketSessionLimit(t *testing.T) {
	rt := newRuntimeExec(t, []string{"wait"}, criremotecommand.Options{Stdin: true, Stdout: true})
	cfg := testConfig()
	cfg.MaxWebSocketSessions = 1
	s, _ := startWSServer(t, cfg, rt)
	req := &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: rt.cmd, Stdin: true, Stdout: true}
	first, _, err := dialWS(t, s, req, wsV5)
	if err != nil {
		t.Fatalf("first session refused: %v", err)
	}
	<-rt.started
	if v := metricValue(t, s.reg, "crishim_stream_websocket_sessions_active"); v != 1 {
		t.Errorf("crishim_stream_websocket_sessions_active %v, want 1", v)
	}
	calls := s.rt.calls.Load()
	_, resp, err := dialWS(t, s, req, wsV5)
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second session: %v, %v: want 429", err, resp)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "--stream-max-websocket-sessions") || !strings.Contains(string(body), "SPDY") {
		t.Errorf("refusal %q: want the limit's flag and what to do", body)
	}
	if s.rt.calls.Load() != calls {
		t.Error("a refused session reached the runtime")
	}
	if v := metricValue(t, s.reg, "crishim_stream_websocket_sessions_refused_total"); v != 1 {
		t.Errorf("crishim_stream_websocket_sessions_refused_total %v, want 1", v)
	}
	// SPDY is not counted: the echo backend answers it.
	s.rt.url = s.backend.URL
	u, err := s.Issue(Exec, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, resp := upgradeTo(t, s.Addr(), http.MethodPost, pathOf(t, u), "SPDY/3.1"); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Errorf("a SPDY session at the WebSocket limit answered %s", resp.Status)
	}
	s.rt.url = rt.URL

	_ = first.c.Close()
	rt.waitEnded(t)
	waitFor(t, "the first session's end", func() bool {
		return metricValue(t, s.reg, "crishim_stream_websocket_sessions_active") == 0
	})
	if _, _, err := dialWS(t, s, req, wsV5); err != nil {
		t.Errorf("a session after the first ended refused: %v", err)
	}
}

// TestWebSocketFrameLimit: a frame over wsReadLimit ends the client's side
// before the WebSocket server reads it whole; one within passes.
func TestWebSocketFrameLimit(t *testing.T) {
	rt := newRuntimeExec(t, []string{"cat"}, criremotecommand.Options{Stdin: true, Stdout: true})
	s, _ := startWSServer(t, testConfig(), rt)
	c, _, err := dialWS(t, s, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: rt.cmd, Stdin: true, Stdout: true}, wsV5)
	if err != nil {
		t.Fatalf("WebSocket session refused: %v", err)
	}
	<-rt.started
	c.send(rcconst.StreamStdIn, make([]byte, wsReadLimit-1)) // the channel byte makes the limit
	got := 0
	for got < wsReadLimit-1 {
		_, msg, err := c.c.ReadMessage()
		if err != nil {
			t.Fatalf("after %d bytes of the frame within the limit: %v", got, err)
		}
		if len(msg) > 0 && msg[0] == rcconst.StreamStdOut {
			got += len(msg) - 1
		}
	}
	c.send(rcconst.StreamStdIn, make([]byte, wsReadLimit))
	if err := rt.waitEnded(t); !errors.Is(err, errCut) && err != nil {
		t.Logf("the command ended with %v", err)
	}
	if chans, _ := c.readAll(); len(chans[rcconst.StreamStdOut]) != 0 || chans[rcconst.StreamErr] != "" {
		t.Errorf("after the frame over the limit: stdout %d bytes, status %q; want the session cut", len(chans[rcconst.StreamStdOut]), chans[rcconst.StreamErr])
	}
}

// TestFrameLimit reads frame headers of every length encoding, split
// anywhere.
func TestFrameLimit(t *testing.T) {
	frame := func(n int, masked bool) []byte {
		var h []byte
		switch {
		case n < 126:
			h = []byte{0x82, byte(n)}
		case n < 1<<16:
			h = []byte{0x82, 126, byte(n >> 8), byte(n)}
		default:
			h = []byte{0x82, 127, 0, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
		}
		if masked {
			h[1] |= 0x80
			h = append(h, 1, 2, 3, 4)
		}
		return append(h, make([]byte, n)...)
	}
	var ok []byte
	for _, n := range []int{0, 125, 126, 65535, 65536, wsReadLimit} {
		ok = append(ok, frame(n, true)...)
		ok = append(ok, frame(n, false)...)
	}
	for _, step := range []int{1, 7, 4096, len(ok)} {
		var f frameLimit
		for i := 0; i < len(ok); i += step {
			if err := f.check(ok[i:min(i+step, len(ok))]); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
		if f.n != 0 || f.left != 0 {
			t.Errorf("step %d: ended inside a frame", step)
		}
		if err := f.check(frame(wsReadLimit+1, true)[:14]); err == nil {
			t.Errorf("step %d: a frame over the limit passed", step)
		}
	}
}
