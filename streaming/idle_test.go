package streaming

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestIdleKeepAliveConnectionIsClosed: a local user holding keep-alive
// connections open must not keep crishim's file descriptors forever.
func TestIdleKeepAliveConnectionIsClosed(t *testing.T) {
	s := startServerWith(t, testConfig(), Deps{idleTimeout: 50 * time.Millisecond})
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A hang guard, not a measurement: shorter than defaultIdleTimeout so
	// that a server which ignored the test's idle timeout fails here
	// rather than passing late.
	_ = c.SetDeadline(time.Now().Add(defaultIdleTimeout / 2))
	fmt.Fprintf(c, "GET /exec/no-such-token HTTP/1.1\r\nHost: %s\r\n\r\n", s.Addr())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Close {
		t.Fatal("the server closed after the answer; the test needs a kept-alive connection")
	}
	if _, err := br.ReadByte(); err == nil || isTimeout(err) {
		t.Fatalf("the idle connection was not closed by the server: %v", err)
	}
}

// TestUpgradedStreamOutlivesTheIdleTimeout: exec sessions sit idle for
// hours; the idle timeout is for connections between requests only.
func TestUpgradedStreamOutlivesTheIdleTimeout(t *testing.T) {
	const idle = 20 * time.Millisecond
	s := startServerWith(t, testConfig(), Deps{idleTimeout: idle})
	u, err := s.Issue(Exec, &runtimeapi.ExecRequest{ContainerId: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	c, br, resp := upgrade(t, s.Addr(), http.MethodPost, pathOf(t, u))
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %s", resp.Status)
	}
	time.Sleep(10 * idle) // idle well past the timeout
	fmt.Fprint(c, "still there\n")
	if line, err := br.ReadString('\n'); err != nil || line != "still there\n" {
		t.Fatalf("after idling: echo %q, %v", line, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
