package proxy

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// unixPair is two ends of a unix stream socket, as the relay's are.
func unixPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "pair.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestRawIOMovesEveryByteInOrderThroughBackpressure(t *testing.T) {
	a, b := unixPair(t)
	_, w := newRawIO(a)
	r, _ := newRawIO(b)
	if _, ok := w.(*rawWriter); !ok {
		t.Fatalf("a unix socket got %T, want the raw path", w)
	}
	// Far more than the socket buffers: writes must wait for the reader.
	want := make([]byte, 8<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	errc := make(chan error, 1)
	go func() {
		for p := want; len(p) > 0; {
			n := min(len(p), 1+rng.IntN(300<<10))
			if m, err := w.Write(p[:n]); err != nil || m != n {
				errc <- errors.Join(err, io.ErrShortWrite)
				return
			}
			p = p[n:]
		}
		errc <- a.(*net.UnixConn).CloseWrite()
	}()
	var got bytes.Buffer
	buf := make([]byte, 7000)
	for {
		n, err := r.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("read %d bytes, not the %d written", got.Len(), len(want))
	}
}

func TestRawIOHonoursDeadlinesAndClose(t *testing.T) {
	_, b := unixPair(t)
	r, _ := newRawIO(b)
	_ = b.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	_ = b.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 10))
		errc <- err
	}()
	waitFor(t, "the read parked on the poller", func() bool { return parkedIn("rawReader") })
	_ = b.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("read on a closed connection: %v", err)
		}
	case <-time.After(hangBound):
		t.Fatal("close did not end a blocked read")
	}
	_, w := newRawIO(b)
	if _, err := w.Write([]byte("x")); err == nil {
		t.Error("write on a closed connection: no error")
	}
}
