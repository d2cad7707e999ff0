package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// heldListener hands out its first connection only once it has been closed: the
// connection a client made just as Shutdown began, accepted before the listener closed
// and seen by the accept loop after.
type heldListener struct {
	net.Listener
	closeOnce sync.Once
	closed    chan struct{}
	accepted  chan struct{}
	first     bool
}

func (l *heldListener) Accept() (net.Conn, error) {
	if l.first {
		<-l.closed
		return nil, net.ErrClosed
	}
	l.first = true
	nc, err := l.Listener.Accept()
	close(l.accepted)
	if err != nil {
		return nil, err
	}
	<-l.closed
	return nc, nil
}

func (l *heldListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// TestConnectionAcceptedAsShutdownBeginsGoesAway: a connection accepted as Shutdown began
// is not closed unread (on a unix socket its client would read ECONNRESET, as a kubelet did
// across a `systemctl restart crishim`: "error reading server preface: connection reset by
// peer", its pending calls failed) but told to go away before any stream, so that its
// client retries its calls on a new connection, which the next crishim accepts.
func TestConnectionAcceptedAsShutdownBeginsGoesAway(t *testing.T) {
	backendSock := fakeSock(t)
	startFake(t, backendSock, &fakeRuntime{})
	srv, err := NewServer(dialBackend(t, backendSock), ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "crishim.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	hl := &heldListener{Listener: ln, closed: make(chan struct{}), accepted: make(chan struct{})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(hl) }()

	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(nc, nc)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	<-hl.accepted
	shut := make(chan struct{})
	go func() {
		defer close(shut)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}()

	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var goAway *http2.GoAwayFrame
	for goAway == nil {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's preface: %v; want SETTINGS and a GOAWAY", err)
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			goAway = ga
		}
	}
	if goAway.LastStreamID != 0 || goAway.ErrCode != http2.ErrCodeNo {
		t.Errorf("GOAWAY last stream %d, code %v; want 0 and NO_ERROR: no call was taken", goAway.LastStreamID, goAway.ErrCode)
	}
	_ = nc.Close() // as a gRPC client does on a GOAWAY with nothing in flight
	<-shut
	if err := <-served; err != nil && !errors.Is(err, net.ErrClosed) {
		t.Errorf("Serve: %v", err)
	}
}
