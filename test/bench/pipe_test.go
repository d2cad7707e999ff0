package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
)

// The pipe carries bytes both ways, over several of io.Copy's buffers; a
// connection the backend closes is closed to the client; closing the
// listener ends servePipe.
func TestPipeCarriesBothWaysAndPassesTheClose(t *testing.T) {
	dir := t.TempDir()
	backendSock, pipeSock := filepath.Join(dir, "backend.sock"), filepath.Join(dir, "pipe.sock")
	backend, err := net.Listen("unix", backendSock)
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	ln, err := net.Listen("unix", pipeSock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- servePipe(ln, backendSock) }()

	client, err := net.Dial("unix", pipeSock)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := backend.Accept()
	if err != nil {
		t.Fatal(err)
	}
	request := bytes.Repeat([]byte("kubelet "), 1<<17) // 1 MiB
	for _, way := range []struct {
		name     string
		from, to net.Conn
	}{{"client to backend", client, server}, {"backend to client", server, client}} {
		wrote := make(chan error, 1)
		go func() { _, err := way.from.Write(request); wrote <- err }()
		got := make([]byte, len(request))
		if _, err := io.ReadFull(way.to, got); err != nil || !bytes.Equal(got, request) {
			t.Fatalf("%s: read %v, the bytes equal: %v", way.name, err, bytes.Equal(got, request))
		}
		if err := <-wrote; err != nil {
			t.Fatalf("%s: write: %v", way.name, err)
		}
	}

	_ = server.Close()
	if rest, err := io.ReadAll(client); err != nil || len(rest) != 0 {
		t.Fatalf("client after the backend's close: read %q, %v; want the end", rest, err)
	}
	_ = ln.Close()
	if err := <-served; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("servePipe after its listener closed: %v", err)
	}
}
