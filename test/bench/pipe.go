package main

import (
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
// the way crishim runs, and kills it when done: the connections end with
// the process.
func runPipe(listen, backend string) error {
	_ = os.Remove(listen)
	ln, err := net.Listen("unix", listen)
	if err != nil {
		return fmt.Errorf("pipe: %w", err)
	}
	fmt.Println("ready")
	return servePipe(ln, backend)
}

// servePipe pipes every connection ln accepts to a fresh one to the backend
// socket, until ln is closed. Each connection's goroutine ends with it.
func servePipe(ln net.Listener, backendSock string) error {
	for {
		client, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("pipe: accept: %w", err)
		}
		go func() {
			defer client.Close()
			backend, err := net.Dial("unix", backendSock)
			if err != nil {
				return // the client sees its connection closed
			}
			defer backend.Close()
			pipeConns(client, backend)
		}()
	}
}

// pipeConns copies a to b and b to a until either side ends, which closes
// both (gRPC never half-closes a connection), and returns when both copies
// have ended.
func pipeConns(a, b net.Conn) {
	var wg sync.WaitGroup
	copyThenClose := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = a.Close()
		_ = b.Close()
	}
	wg.Go(func() { copyThenClose(b, a) })
	copyThenClose(a, b)
	wg.Wait()
}
