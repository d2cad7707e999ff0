package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestSlowDialStallsNoOtherCall: a runtime slow to accept holds back only
// the calls that wait for it, not the other calls of the same client
// connection.
func TestSlowDialStallsNoOtherCall(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	version := Unary("/runtime.v1.RuntimeService/Version", func(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
		return &runtimeapi.VersionResponse{RuntimeName: "local"}, nil
	})
	p := startProxy(t, sock, version)
	release := make(chan struct{})
	dialing := make(chan struct{}, 1)
	ep := p.server.relay.endpoints[routeRuntime]
	ep.mu.Lock() // connect reads dial under it
	realDial := ep.dial
	ep.dial = func(ctx context.Context) (net.Conn, error) {
		dialing <- struct{}{}
		// Deaf to ctx, as a connect(2) stuck in the kernel is: what must
		// not wait is the rest of the session.
		select {
		case <-release:
		case <-time.After(hangBound):
		}
		return realDial(context.Background())
	}
	ep.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	slow := make(chan error, 1)
	go func() {
		slow <- p.conn.Invoke(ctx, "/runtime.v1.RuntimeService/Bulk", NewFrame([]byte("x")), &Frame{})
	}()
	<-dialing
	// The runtime has not accepted: a call to crishim itself, on the same
	// connection, must not wait for it.
	fast := make(chan error, 1)
	go func() {
		_, err := runtimeapi.NewRuntimeServiceClient(p.conn).Version(ctx, &runtimeapi.VersionRequest{})
		fast <- err
	}()
	select {
	case err := <-fast:
		if err != nil {
			t.Errorf("a call to crishim during a slow dial: %v", err)
		}
	case <-time.After(hangBound / 2):
		t.Error("a call to crishim waited for the dial to the runtime")
	}
	close(release)
	if err := <-slow; err != nil {
		t.Errorf("the call that waited for the dial: %v", err)
	}
}

// TestCancelledDialIsNoRuntimeFailure: a client that hangs up while its
// session dials cancels the dial; that says nothing about the runtime, and
// must not make every other session's calls fail until the backoff ends.
func TestCancelledDialIsNoRuntimeFailure(t *testing.T) {
	var d net.Dialer
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	e := &endpoint{name: "runtime", dial: func(ctx context.Context) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.connect(ctx); err == nil {
		t.Fatal("a cancelled dial succeeded")
	}
	e.mu.Lock()
	e.dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) }
	e.mu.Unlock()
	nc, err := e.connect(context.Background())
	if err != nil {
		t.Fatalf("the next dial: %v", err)
	}
	nc.Close()
}
