package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
)

// runPipe is the floor the benchmark measures crishim against: a plain
// byte-copying unix-socket pipe, one backend connection per client
// connection and io.Copy (its 32 KiB buffer) each way, no HTTP/2 and no
// gRPC. The benchmark runs it as a process of its own with GOMAXPROCS=1,
// the way crishim runs. It serves until ctx is done (SIGTERM).
func runPipe(ctx context.Context, listen, backend string) error {
	_ = os.Remove(listen)
	ln, err := net.Listen("unix", listen)
	if err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	fmt.Println("ready")
	return servePipe(ctx, ln, func() (net.Conn, error) { return net.Dial("unix", backend) })
}

// servePipe accepts connections on ln and pipes each to a fresh connection
// from dial until ctx is done; then it closes ln and every connection and
// returns once all of its goroutines have ended.
func servePipe(ctx context.Context, ln net.Listener, dial func() (net.Conn, error)) error {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		conns   = map[net.Conn]struct{}{}
		stopped bool
	)
	// track registers c to be closed at shutdown; false if that has begun
	// (c is closed then).
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			_ = c.Close()
			return false
		}
		conns[c] = struct{}{}
		return true
	}
	untrack := func(c net.Conn) {
		mu.Lock()
		delete(conns, c)
		mu.Unlock()
		_ = c.Close()
	}
	shutdown := func() {
		mu.Lock()
		stopped = true
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
	stopAccept := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stopAccept()
	for {
		client, err := ln.Accept()
		if err != nil {
			shutdown()
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("pipe: accept: %w", err)
		}
		if !track(client) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer untrack(client)
			backend, err := dial()
			if err != nil {
				return // the client sees its connection closed
			}
			if !track(backend) {
				return
			}
			defer untrack(backend)
			pipeConns(client, backend)
		}()
	}
}

// pipeConns copies a to b and b to a, one goroutine each way, and returns
// when both directions have ended.
func pipeConns(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyHalf(b, a)
	}()
	copyHalf(a, b)
	<-done
}

// copyHalf copies src to dst as TCP would: src's end of stream closes dst
// for writing only, so the other direction keeps flowing; an error closes
// both connections, which ends the other direction too.
func copyHalf(dst, src net.Conn) {
	if _, err := io.Copy(dst, src); err != nil {
		_ = dst.Close()
		_ = src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}
