package streaming

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/spdystream/spdy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rcconst "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	clientspdy "k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criremotecommand "k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// shutdownClient is how a test's client reaches a stream URL.
type shutdownClient func(t *testing.T, rawURL string) remotecommand.Executor

func wsExecutor(t *testing.T, rawURL string) remotecommand.Executor {
	t.Helper()
	e, err := remotecommand.NewWebSocketExecutor(&rest.Config{}, http.MethodGet, rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// spdyExecutorFor is client-go's SPDY executor offering only protocols.
func spdyExecutorFor(protocols ...string) shutdownClient {
	return func(t *testing.T, rawURL string) remotecommand.Executor {
		t.Helper()
		u, err := url.Parse(rawURL)
		if err != nil {
			t.Fatal(err)
		}
		rt, up, err := clientspdy.RoundTripperFor(&rest.Config{})
		if err != nil {
			t.Fatal(err)
		}
		e, err := remotecommand.NewSPDYExecutorForProtocols(rt, up, http.MethodPost, u, protocols...)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
}

// TestShutdownTellsTheClient: an exec or attach still open at the shutdown
// timeout ends at its client with a failure saying crishim shut down (a
// status on the error stream, as a command's failure), not as if its
// command had ended; its ended event says the same. WebSocket sessions,
// which crishim serves itself, and SPDY sessions crishim parses (an
// audited exec), in every protocol version.
func TestShutdownTellsTheClient(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client shutdownClient
		tty    bool
		want   string
	}{
		{"websocket v5", wsExecutor, false, shutdownMessage},
		{"websocket v5 tty", wsExecutor, true, shutdownMessage},
		{"spdy v4", spdyExecutorFor(rcconst.StreamProtocolV4Name), false, shutdownMessage},
		{"spdy v4 tty", spdyExecutorFor(rcconst.StreamProtocolV4Name), true, shutdownMessage},
		{"spdy v3", spdyExecutorFor(rcconst.StreamProtocolV3Name), false, "error executing remote command: " + shutdownMessage},
		{"spdy v2", spdyExecutorFor(rcconst.StreamProtocolV2Name), false, "error executing remote command: " + shutdownMessage},
		// Output flowing at the shutdown: the copy stops inside a
		// frame, which is passed whole before the status.
		{"spdy v4 output flowing", spdyExecutorFor(rcconst.StreamProtocolV4Name), false, shutdownMessage},
		{"websocket v5 output flowing", wsExecutor, false, shutdownMessage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := criremotecommand.Options{Stdin: true, Stdout: true, Stderr: !tc.tty, TTY: tc.tty}
			cmd := "ready"
			if strings.HasSuffix(tc.name, "flowing") {
				cmd = "flood"
			}
			rt := newRuntimeExec(t, []string{cmd}, opts)
			s, auditPath := startWSServer(t, testConfig(), rt)
			u, err := s.Issue(Exec, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: rt.cmd, Stdin: true, Stdout: true, Stderr: !tc.tty, Tty: tc.tty})
			if err != nil {
				t.Fatal(err)
			}
			stdin, stdinW := io.Pipe()
			defer stdinW.Close()
			ready := newFirstWrite()
			so := remotecommand.StreamOptions{Stdin: stdin, Stdout: ready, Tty: tc.tty}
			if !tc.tty {
				so.Stderr = io.Discard
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- tc.client(t, u).StreamWithContext(ctx, so) }()
			ready.wait(t, done)

			sctx, scancel := context.WithCancel(context.Background())
			scancel() // the shutdown timeout is over before it starts
			if err := s.Shutdown(sctx); err != nil {
				t.Fatal(err)
			}
			err = <-done
			if err == nil || err.Error() != tc.want {
				t.Errorf("the client's result: %v, want %q", err, tc.want)
			}
			if end := endedEvent(t, auditPath); end.Error != errCutAtShutdown.Error() {
				t.Errorf("ended event's error %q, want %q", end.Error, errCutAtShutdown)
			}
			<-s.served
			s.served <- nil // for the cleanup
		})
	}
}

// TestShutdownCutsUnparsedSPDY: a SPDY session crishim does not parse
// (not audited, not recorded: its copy stays in the kernel) cannot be
// told, and is cut as before: the client returns.
func TestShutdownCutsUnparsedSPDY(t *testing.T) {
	rt := newRuntimeExec(t, []string{"ready"}, criremotecommand.Options{Stdin: true, Stdout: true})
	s := startServer(t, testConfig())
	s.rt.url = rt.URL
	u, err := s.Issue(Exec, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: rt.cmd, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	stdin, stdinW := io.Pipe()
	defer stdinW.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	done := make(chan error, 1)
	ready := newFirstWrite()
	go func() {
		done <- spdyExecutorFor(rcconst.StreamProtocolV4Name)(t, u).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: ready})
	}()
	ready.wait(t, done)
	sctx, scancel := context.WithCancel(context.Background())
	scancel()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil && strings.Contains(err.Error(), shutdownMessage) {
			t.Errorf("an unparsed session was told %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the client did not return")
	}
	<-s.served
	s.served <- nil
}

// firstWrite is a client's stdout telling the command's first output: the
// client has set up all of its streams (each waits for the runtime's
// reply), so a cut from now on is not one in the middle of the setup.
type firstWrite struct {
	once sync.Once
	ch   chan struct{}
}

func newFirstWrite() *firstWrite { return &firstWrite{ch: make(chan struct{})} }

func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.ch) })
	return len(p), nil
}

func (w *firstWrite) wait(t *testing.T, done chan error) {
	t.Helper()
	select {
	case <-w.ch:
	case err := <-done:
		t.Fatalf("the session ended before its output: %v", err)
	}
}

func (s *spdyFrames) reply(t *testing.T, id spdy.StreamId, fin bool) {
	f := &spdy.SynReplyFrame{StreamId: id, Headers: http.Header{}}
	if fin {
		f.CFHeader.Flags = spdy.ControlFlagFin
	}
	if err := s.f.WriteFrame(f); err != nil {
		t.Fatal(err)
	}
}

// TestEndFrames: the frames telling a SPDY client why its session ends are
// written only where the client's next byte starts a frame and its error
// stream is open at the runtime's side; they end the error stream with the
// status, and stdout and stderr, and a client's framer reads them after
// the runtime's frames.
func TestEndFrames(t *testing.T) {
	const body = `{"status":"Failure"}`
	tests := []struct {
		name  string
		rtime func(t *testing.T, c *spdyFrames)
		chop  int // bytes of the runtime's frames the client was not sent
		ok    bool
	}{
		{"whole frames", func(t *testing.T, c *spdyFrames) {
			c.reply(t, idError, false)
			c.reply(t, idStdin, false)
			c.reply(t, idStdout, false)
			c.reply(t, idStderr, false)
			c.data(t, idStdout, "out")
		}, 0, true},
		{"inside a data frame", func(t *testing.T, c *spdyFrames) {
			c.reply(t, idError, false)
			c.reply(t, idStdout, false)
			c.data(t, idStdout, "output")
		}, 2, false},
		{"inside a data frame's header", func(t *testing.T, c *spdyFrames) {
			c.reply(t, idError, false)
			c.reply(t, idStdout, false)
			c.data(t, idStdout, "output")
		}, len("output") + 3, false},
		{"error stream ended", func(t *testing.T, c *spdyFrames) {
			c.reply(t, idError, false)
			c.reply(t, idStdout, false)
			if err := c.f.WriteFrame(&spdy.DataFrame{StreamId: idError, Flags: spdy.DataFlagFin}); err != nil {
				t.Fatal(err)
			}
		}, 0, false},
		{"error stream not replied to", func(t *testing.T, c *spdyFrames) {
			c.reply(t, idStdout, false)
		}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", "http://x/exec/t", nil)
			req.Header.Set("Upgrade", "SPDY/3.1")
			tap := newSPDYTap(req, &exitStatus{})
			client, rtime := newSPDYFrames(t), newSPDYFrames(t)
			client.syn(t, idError, "error")
			client.syn(t, idStdin, "stdin")
			client.syn(t, idStdout, "stdout")
			client.syn(t, idStderr, "stderr")
			tt.rtime(t, rtime)
			sent := rtime.buf.Bytes()[:rtime.buf.Len()-tt.chop]

			for _, dir := range []struct {
				toRuntime bool
				b         []byte
			}{{true, client.buf.Bytes()}, {false, sent}} {
				w, end := tap.writer(dir.toRuntime)
				if _, err := w.Write(dir.b); err != nil {
					t.Fatal(err)
				}
				end()
			}
			// Both parses done: in a session the client's SYN_STREAMs
			// were parsed long before (its streams waited for replies).
			tap.wait()
			frames, ok := tap.endFrames([]byte(body))
			if ok != tt.ok {
				t.Fatalf("told %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			// The client reads them after what it was sent, with the
			// framer (and its header state) it read those with.
			cf, err := spdy.NewFramer(io.Discard, io.MultiReader(bytes.NewReader(sent), bytes.NewReader(frames)))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for {
				f, err := cf.ReadFrame()
				if err != nil {
					break
				}
				if d, ok := f.(*spdy.DataFrame); ok {
					got = append(got, fmt.Sprintf("%d fin=%v %q", d.StreamId, d.Flags&spdy.DataFlagFin != 0, d.Data))
				}
			}
			want := []string{
				fmt.Sprintf("%d fin=false %q", idStdout, "out"),
				fmt.Sprintf("%d fin=true %q", idError, body),
				fmt.Sprintf("%d fin=true %q", idStdout, ""),
				fmt.Sprintf("%d fin=true %q", idStderr, ""),
			}
			if !slices.Equal(got, want) {
				t.Errorf("the client reads\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestErrorStreamBody: the status is written in the protocol version the
// runtime's upgrade response names, and only when that response was read
// whole and alone.
func TestErrorStreamBody(t *testing.T) {
	resp := func(version, after string) []byte {
		h := "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
		if version != "" {
			h += "X-Stream-Protocol-Version: " + version + "\r\n"
		}
		return []byte(h + "\r\n" + after)
	}
	for _, tc := range []struct {
		name string
		head []byte
		full bool
		want string // "" : not told
	}{
		{"v4", resp(rcconst.StreamProtocolV4Name, ""), false, "json"},
		{"v3", resp(rcconst.StreamProtocolV3Name, ""), false, shutdownMessage},
		{"v1, no header", resp("", ""), false, shutdownMessage},
		{"unknown version", resp("v9.channel.k8s.io", ""), false, ""},
		{"bytes past the response", resp(rcconst.StreamProtocolV4Name, "\x80"), false, ""},
		{"response not whole", resp(rcconst.StreamProtocolV4Name, "")[:20], false, ""},
		{"response over headMax", nil, true, ""},
		{"not upgraded", []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sess := &session{head: tc.head, headFull: tc.full}
			body, ok := sess.errorStreamBody()
			switch {
			case tc.want == "" && ok:
				t.Errorf("told %q", body)
			case tc.want == "json":
				var st metav1.Status
				if err := json.Unmarshal(body, &st); !ok || err != nil || st.Status != metav1.StatusFailure || st.Message != shutdownMessage {
					t.Errorf("status %q (%v), want a Failure saying %q", body, err, shutdownMessage)
				}
			case tc.want != "" && (!ok || string(body) != tc.want):
				t.Errorf("body %q (%v), want %q", body, ok, tc.want)
			}
		})
	}
}

// TestShutdownBoundsTelling: a SPDY client told its status that neither
// reads it nor closes does not hold the shutdown up: the session is cut,
// both sides, tellWait after the timeout (without the bound Shutdown would
// wait for it for ever).
func TestShutdownBoundsTelling(t *testing.T) {
	rt := newRuntimeExec(t, []string{"ready"}, criremotecommand.Options{Stdin: true, Stdout: true})
	s, auditPath := startWSServer(t, testConfig(), rt) // audited: parsed, told
	u, err := s.Issue(Exec, &runtimeapi.ExecRequest{ContainerId: "c1", Cmd: rt.cmd, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	transport, upgrader, err := clientspdy.RoundTripperFor(&rest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := clientspdy.Negotiate(upgrader, &http.Client{Transport: transport}, req, rcconst.StreamProtocolV4Name)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, typ := range []string{"error", "stdin", "stdout"} {
		h := http.Header{}
		h.Set("streamtype", typ)
		if _, err := conn.CreateStream(h); err != nil { // waits for the runtime's reply
			t.Fatal(err)
		}
	}
	<-rt.started

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		shut <- s.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the shutdown waits for a client that does not close") // a hang guard
	}
	if err := rt.waitEnded(t); !errors.Is(err, errCut) {
		t.Errorf("the command ended with %v, want its session cut", err)
	}
	if end := endedEvent(t, auditPath); end.Error != errCutAtShutdown.Error() {
		t.Errorf("ended event's error %q, want %q", end.Error, errCutAtShutdown)
	}
	<-s.served
	s.served <- nil
}

// TestFrameTrack: a copy stopped anywhere in the runtime's frames, inside
// a header or a payload, passes exactly the rest of that frame (and no
// more) before the status.
func TestFrameTrack(t *testing.T) {
	rtime := newSPDYFrames(t)
	ends := []int{0}
	rtime.reply(t, idError, false)
	ends = append(ends, rtime.buf.Len())
	for _, n := range []int{0, 1, 7, 8, 300, 70 << 10} {
		rtime.data(t, idStdout, strings.Repeat("z", n))
		ends = append(ends, rtime.buf.Len())
	}
	b := rtime.buf.Bytes()
	for k := 0; k <= len(b); k++ {
		var f frameTrack
		_, _ = f.Write(b[:k])
		pos := k
		for left := f.left(); left > 0; left = f.left() {
			_, _ = f.Write(b[pos : pos+int(left)])
			pos += int(left)
		}
		i, _ := slices.BinarySearch(ends, k)
		if pos != ends[i] {
			t.Fatalf("stopped at %d: passed to %d, want the frame's end %d", k, pos, ends[i])
		}
	}
}
