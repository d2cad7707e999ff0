package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
)

// executors are the kubelet's and kubectl's clients for a stream URL.
// Runtimes serve SPDY up to v4 and WebSocket v4 (v5 is the API server's,
// translated to SPDY before it reaches a node); crishim serves WebSocket
// itself, v5 (client-go's executor as it comes, crictl -r websocket) as well
// as v4.
var executors = []struct {
	name string
	new  func(t *testing.T, rawURL string) remotecommand.Executor
}{
	{"spdy", spdyExecutor},
	{"websocket", websocketExecutor},
	{"websocket-v5", websocketV5Executor},
}

func spdyExecutor(t *testing.T, rawURL string) remotecommand.Executor {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	e, err := remotecommand.NewSPDYExecutor(&rest.Config{}, http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func websocketExecutor(t *testing.T, rawURL string) remotecommand.Executor {
	t.Helper()
	e, err := remotecommand.NewWebSocketExecutorForProtocols(&rest.Config{}, http.MethodGet, rawURL, "v4.channel.k8s.io")
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// checkCrishimURL fails unless rawURL is one of crishim's: an absolute
// loopback URL of the given kind holding a token of at least 128 bits.
func checkCrishimURL(t *testing.T, rawURL, kind string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "http" || !strings.HasPrefix(u.Host, "127.0.0.1:") {
		t.Fatalf("stream URL %q: want http://127.0.0.1:PORT/...", rawURL)
	}
	token, ok := strings.CutPrefix(u.Path, "/"+kind+"/")
	if !ok || len(token) < 22 {
		t.Fatalf("stream URL %q: want /%s/ and a token of 128 bits or more (the runtime's own tokens are 8 characters)", rawURL, kind)
	}
}

// exitCode is the remote command's exit code carried by a stream error; -1
// when err carries none.
func exitCode(err error) int {
	var e interface{ ExitStatus() int }
	if errors.As(err, &e) {
		return e.ExitStatus()
	}
	if err == nil {
		return 0
	}
	return -1
}

// terminal is the client end of a TTY session: a stdin pipe, the output
// collected, and the sizes to send.
type terminal struct {
	in    *io.PipeWriter
	inR   *io.PipeReader
	mu    sync.Mutex
	out   bytes.Buffer
	sizes chan remotecommand.TerminalSize
}

func newTerminal() *terminal {
	r, w := io.Pipe()
	return &terminal{in: w, inR: r, sizes: make(chan remotecommand.TerminalSize, 4)}
}

func (tm *terminal) Write(p []byte) (int, error) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.out.Write(p)
}

func (tm *terminal) output() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.out.String()
}

// Next implements remotecommand.TerminalSizeQueue.
func (tm *terminal) Next() *remotecommand.TerminalSize {
	s, ok := <-tm.sizes
	if !ok {
		return nil
	}
	return &s
}

// typeUntil types line until the output shows want: a keystroke typed
// before the shell or a resize is ready is not lost, only retried.
func (tm *terminal) typeUntil(t *testing.T, ctx context.Context, line, want string) {
	t.Helper()
	for !strings.Contains(tm.output(), want) {
		if _, err := io.WriteString(tm.in, line); err != nil {
			t.Fatalf("typing %q: %v", line, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %q in the terminal after typing %q:\n%s", want, line, tm.output())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// scrape reads the metrics crishim exposes, without keep-alive so that the
// scrape leaves no connection (and goroutine) behind in crishim.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	values := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			values[line[:i]] = v
		}
	}
	return values
}
