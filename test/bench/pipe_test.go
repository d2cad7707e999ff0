package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
)

// startTestPipe serves a pipe to a backend listener; every backend
// connection goes to handle. Both end with the test.
func startTestPipe(t *testing.T, handle func(*net.UnixConn)) (pipeSock string, cancel context.CancelFunc, served <-chan error) {
	t.Helper()
	dir := t.TempDir()
	backend, err := net.Listen("unix", filepath.Join(dir, "backend.sock"))
	if err != nil {
		t.Fatal(err)
	}
	backendDone := make(chan struct{})
	go func() {
		defer close(backendDone)
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			handle(c.(*net.UnixConn))
			_ = c.Close()
		}
	}()
	pipeSock = filepath.Join(dir, "pipe.sock")
	ln, err := net.Listen("unix", pipeSock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- servePipe(ctx, ln, func() (net.Conn, error) { return net.Dial("unix", backend.Addr().String()) })
	}()
	t.Cleanup(func() {
		cancel()
		_ = backend.Close()
		<-backendDone
	})
	return pipeSock, cancel, errc
}

func dialUnix(t *testing.T, sock string) *net.UnixConn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.UnixConn)
}

// The client's half-close reaches the backend, which answers after it: the
// request needs several of io.Copy's buffers each way.
func TestPipeClientHalfCloseReachesBackend(t *testing.T) {
	request := bytes.Repeat([]byte("kubelet "), 1<<17) // 1 MiB
	got := make(chan []byte, 1)
	sock, _, _ := startTestPipe(t, func(c *net.UnixConn) {
		b, err := io.ReadAll(c) // ends only with the client's CloseWrite
		if err != nil {
			t.Error(err)
		}
		got <- b
		_, _ = c.Write(append([]byte("answer to "), b...))
	})
	c := dialUnix(t, sock)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(request)
		errc <- errors.Join(err, c.CloseWrite())
	}()
	answer, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, request) {
		t.Fatalf("backend got %d bytes, want the %d sent", len(b), len(request))
	}
	if want := append([]byte("answer to "), request...); !bytes.Equal(answer, want) {
		t.Fatalf("client got %d bytes, want %d", len(answer), len(want))
	}
}

// The backend's half-close reaches the client, whose bytes still flow the
// other way afterwards.
func TestPipeBackendHalfCloseReachesClient(t *testing.T) {
	got := make(chan []byte, 1)
	sock, _, _ := startTestPipe(t, func(c *net.UnixConn) {
		_, err := c.Write([]byte("hello"))
		if err == nil {
			err = c.CloseWrite()
		}
		if err != nil {
			t.Error(err)
		}
		b, _ := io.ReadAll(c)
		got <- b
	})
	c := dialUnix(t, sock)
	hello, err := io.ReadAll(c) // ends only with the backend's CloseWrite
	if err != nil || string(hello) != "hello" {
		t.Fatalf("client read %q, %v; want hello", hello, err)
	}
	if _, err := c.Write([]byte("after the backend's EOF")); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; string(b) != "after the backend's EOF" {
		t.Fatalf("backend got %q", b)
	}
}

// Canceling the pipe closes its listener and the connections it carries,
// and servePipe returns only after its goroutines have ended.
func TestPipeStopsOnCancel(t *testing.T) {
	piped, release := make(chan struct{}), make(chan struct{})
	sock, cancel, served := startTestPipe(t, func(c *net.UnixConn) {
		_, _ = c.Read(make([]byte, 1))
		close(piped)
		_, _ = io.ReadAll(c) // until the pipe closes its backend connection
		close(release)
	})
	c := dialUnix(t, sock)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	<-piped
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("servePipe: %v", err)
	}
	<-release
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("client read after stop: %v", err)
	}
	if _, err := net.Dial("unix", sock); err == nil {
		t.Fatal("the pipe still accepts after stop")
	}
}
