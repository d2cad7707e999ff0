package metrics

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestIdleKeepAliveConnectionIsClosed: a local user holding keep-alive
// connections to the metrics port must not keep crishim's file descriptors
// forever.
func TestIdleKeepAliveConnectionIsClosed(t *testing.T) {
	s, err := listen("127.0.0.1:0", New("test", "test", nil), func(context.Context) error { return nil },
		slog.New(slog.DiscardHandler), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	t.Cleanup(func() {
		_ = s.Shutdown(context.Background())
		<-served
	})
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute)) // a hang guard, not a measurement
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", s.Addr())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("healthz answered %s, close %v; the test needs a kept-alive connection", resp.Status, resp.Close)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the server wrote after the answer")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the idle connection was not closed by the server")
	}
}
