package proxy

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// watchUps runs b.Watch until the test ends and returns what it reports about the
// runtime connection.
func watchUps(t *testing.T, b *Backend) <-chan bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ups := make(chan bool, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Watch(ctx, func(backend string, up bool) {
			if backend == "runtime" {
				ups <- up
			}
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ups
}

// expectUp waits for the next report; the bound turns a report that never comes into
// a failure, it measures nothing.
func expectUp(t *testing.T, ups <-chan bool, want bool, what string) {
	t.Helper()
	select {
	case got := <-ups:
		if got != want {
			t.Fatalf("%s: runtime reported up=%v, want %v", what, got, want)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s: no report of up=%v within a minute", what, want)
	}
}

// TestWatchSeesRuntimeDieOnIdleNode: the runtime dies while nothing calls it (an idle
// node): the watch reports it down, and up again when it is back. grpc-go leaves a lost
// connection idle until the next call, which on an idle node never came: crishim_runtime_up
// stayed 1 and the CrishimRuntimeDown alert could not fire.
func TestWatchSeesRuntimeDieOnIdleNode(t *testing.T) {
	sock := fakeSock(t)
	gs := startFake(t, sock, &fakeRuntime{})
	b := dialBackend(t, sock)
	ups := watchUps(t, b)
	expectUp(t, ups, true, "runtime serving")
	gs.Stop() // the runtime dies; nobody calls
	expectUp(t, ups, false, "runtime stopped")
	startFake(t, sock, &fakeRuntime{})
	expectUp(t, ups, true, "runtime back")
}

// wedgedRuntime accepts connections and calls but answers Version only when released.
type wedgedRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	release chan struct{}
}

func (w *wedgedRuntime) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	select {
	case <-w.release:
		return &runtimeapi.VersionResponse{RuntimeName: "wedged"}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestWatchProbesAWedgedRuntime: a runtime whose connection stays up but which answers
// nothing is down; it is up again once it answers.
func TestWatchProbesAWedgedRuntime(t *testing.T) {
	sock := fakeSock(t)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	w := &wedgedRuntime{release: make(chan struct{})}
	gs := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(gs, w)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	b, err := Dial(BackendOptions{RuntimeEndpoint: "unix://" + sock, ProbeInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ups := watchUps(t, b)
	expectUp(t, ups, true, "connected")
	expectUp(t, ups, false, "connected, Version unanswered")
	close(w.release)
	expectUp(t, ups, true, "answering again")
}

// TestReconnectWhenTheRuntimeSocketIsCreated: after a runtime restart, the
// relay and the gRPC connection reconnect when the runtime's socket is
// created, not at the end of their backoff (grown to about a second after
// a restart of a few seconds). Their backoff here is an hour: only the
// socket's creation can explain a call that succeeds.
func TestReconnectWhenTheRuntimeSocketIsCreated(t *testing.T) {
	sock := fakeSock(t) // no runtime yet
	hour := backoff.Config{BaseDelay: time.Hour, Multiplier: 1, MaxDelay: time.Hour}
	b, err := Dial(BackendOptions{RuntimeEndpoint: "unix://" + sock, backoff: &hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	p := startProxyWith(t, b, ServerOptions{})
	watchUps(t, b)
	// A bound on a wait for something that happens at once; it measures
	// nothing, and is short so that a broken watch fails in seconds.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitFor(t, "the socket watch parked on inotify", func() bool { return parkedIn("watchSocket") })

	rs := runtimeapi.NewRuntimeServiceClient(p.conn)
	if _, err := rs.Version(ctx, &runtimeapi.VersionRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("Version with no runtime: %v, want Unavailable", err)
	}
	waitState(ctx, t, b.RuntimeConn(), connectivity.TransientFailure)

	// The runtime starts: its socket listens under another name, then is
	// renamed into place, so that it accepts from the moment it exists.
	tmp := filepath.Join(filepath.Dir(sock), "runtime.sock.new")
	startFake(t, tmp, &fakeRuntime{})
	if err := os.Rename(tmp, sock); err != nil {
		t.Fatal(err)
	}
	waitState(ctx, t, b.RuntimeConn(), connectivity.Ready)
	if _, err := rs.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("a relayed call once the runtime's socket is back: %v", err)
	}
}

// waitState waits until conn is in state want, or ctx ends.
func waitState(ctx context.Context, t *testing.T, conn *grpc.ClientConn, want connectivity.State) {
	t.Helper()
	for s := conn.GetState(); s != want; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("the runtime connection stayed %v, want %v", s, want)
		}
	}
}
