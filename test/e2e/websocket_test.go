package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
)

// websocketV5Executor is client-go's WebSocket executor as it comes: it asks
// for v5.channel.k8s.io alone, which no runtime serves and crishim does.
func websocketV5Executor(t *testing.T, rawURL string) remotecommand.Executor {
	t.Helper()
	e, err := remotecommand.NewWebSocketExecutor(&rest.Config{}, http.MethodGet, rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// castOutput checks a recording is asciicast v2 and returns its header and
// what its output events showed.
func castOutput(t *testing.T, path string) (audit.CastHeader, string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("recording:\n%s", raw)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	var hdr audit.CastHeader
	if err := json.Unmarshal([]byte(lines[0]), &hdr); err != nil || hdr.Version != 2 {
		t.Fatalf("header %s (%v): want asciicast version 2", lines[0], err)
	}
	var output strings.Builder
	for _, l := range lines[1:] {
		var ev []any
		if err := json.Unmarshal([]byte(l), &ev); err != nil || len(ev) != 3 {
			t.Fatalf("event %s: %v", l, err)
		}
		if ev[1] == "o" {
			output.WriteString(ev[2].(string))
		}
	}
	return hdr, output.String()
}

// TestRecordSessionsWebSocket: client-go's WebSocket executor, unmodified
// (v5), execs through crishim; a TTY session is recorded as one over SPDY
// is (the client's terminal size in the header, the output in events) and
// its exit code is in the audit log; a command's non-zero exit code
// reaches both the client and the audit log; v5's stdin close ends a
// command reading stdin.
func TestRecordSessionsWebSocket(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions")
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	d := startCrishim(t, testbed.Endpoint, "--record-sessions", "all", "--record-dir", dir, "--audit-log", auditPath)
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "record-ws", sleeperScript)

	out, end := recordedExecWith(t, websocketV5Executor, rs, auditPath, ctrID, true, "sh", "-c", ttyScript)
	if !strings.Contains(out, "45 123") || !strings.Contains(out, "rec-42") {
		t.Fatalf("exec printed %q", out)
	}
	if end.Recording == "" || filepath.Dir(end.Recording) != dir {
		t.Fatalf("ended event recording %q, want a file in %s", end.Recording, dir)
	}
	hdr, shown := castOutput(t, end.Recording)
	if hdr.Width != 123 || hdr.Height != 45 || hdr.Command != "sh -c "+ttyScript {
		t.Errorf("header %+v: want 123x45 and the command", hdr)
	}
	if !strings.Contains(shown, "45 123") || !strings.Contains(shown, "rec-42") {
		t.Errorf("output events %q lack the command's output", shown)
	}

	// A non-zero exit, and stdin closed by the client (v5's close signal).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := []string{"sh", "-c", "cat; echo ws-out; exit 7"}
	resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: cmd, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	err = websocketV5Executor(t, resp.Url).StreamWithContext(ctx, remotecommand.StreamOptions{
		Stdin: strings.NewReader("typed-in\n"), Stdout: &stdout, Stderr: &stderr})
	if exitCode(err) != 7 {
		t.Fatalf("exec ended with %v (exit code %d), want exit code 7", err, exitCode(err))
	}
	if stdout.String() != "typed-in\nws-out\n" {
		t.Errorf("stdout %q, want stdin echoed then ws-out", stdout.String())
	}
	ended := auditEvent(t, auditPath, "the exec's ended event", func(ev audit.Event) bool {
		return ev.Stage == audit.StageEnded && strings.Join(ev.Argv, " ") == strings.Join(cmd, " ")
	})
	if ended.ExitCode == nil || *ended.ExitCode != 7 || ended.Error != "" {
		t.Errorf("ended event exit code %v, error %q; want 7 and no error", ended.ExitCode, ended.Error)
	}
	if _, shown := castOutput(t, ended.Recording); !strings.Contains(shown, "ws-out") {
		t.Errorf("output events %q lack ws-out", shown)
	}
}

// TestPortForwardOverWebSocketTunnelAudited: client-go's port-forward over
// WebSocket (NewSPDYOverWebsocketDialer: SPDY inside WebSocket, as crictl
// -r websocket and kubectl speak it to the API server; no runtime serves it)
// forwards through crishim to an echo server in the pod, with a CRI request
// naming no port, as crictl's; the session's ended audit event names the
// port the client forwarded to.
func TestPortForwardOverWebSocketTunnelAudited(t *testing.T) {
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	d := startCrishim(t, testbed.Endpoint, "--audit-log", auditPath)
	rs, _ := criClients(t, d.Endpoint)
	podID := echoPod(t, d.Endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	resp, err := rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatalf("PortForward: %v", err)
	}
	u, _ := url.Parse(resp.Url)
	dialer, err := portforward.NewSPDYOverWebsocketDialer(u, &rest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	local, fwErr, stop := forwardEcho(t, dialer)
	if err := echoOnce(local); err != nil {
		t.Fatalf("echo through the port-forward: %v\n%s", err, fwErr.String())
	}
	stop() // the session ends, and with it its audit event

	ev := auditEvent(t, auditPath, "the port-forward's ended event", func(ev audit.Event) bool {
		return ev.Stage == audit.StageEnded && ev.Kind == audit.KindPortForward
	})
	if len(ev.Ports) != 1 || ev.Ports[0] != echoPort || ev.PodSandboxID != podID {
		t.Errorf("ended event %+v: want pod %s and port %d", ev, podID, echoPort)
	}
}

// TestWebSocketClientGoneEndsSession: a WebSocket client that goes away
// mid-session ends crishim's session, and its connection to the runtime,
// even while the command neither reads nor writes (as a proxied session's
// closed connection does).
func TestWebSocketClientGoneEndsSession(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "ws-gone", sleeperScript)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"sleep", "600"}, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	sctx, hangUp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- websocketV5Executor(t, resp.Url).StreamWithContext(sctx, remotecommand.StreamOptions{Stdout: io.Discard})
	}()
	waitUntil(t, ctx, "the session to start", func() bool {
		return scrape(t, d.Metrics)[`crishim_stream_sessions_active{kind="exec"}`] == 1
	})
	hangUp()
	<-done
	waitUntil(t, ctx, "crishim's session to end", func() bool {
		return scrape(t, d.Metrics)[`crishim_stream_sessions_active{kind="exec"}`] == 0
	})
}
