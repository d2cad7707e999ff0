package streaming

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	rcconst "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
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
		rt, up, err := spdy.RoundTripperFor(&rest.Config{})
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := criremotecommand.Options{Stdin: true, Stdout: true, Stderr: !tc.tty, TTY: tc.tty}
			rt := newRuntimeExec(t, []string{"ready"}, opts)
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
