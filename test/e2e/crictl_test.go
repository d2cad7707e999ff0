package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crishim/crishim/test/lockedbuf"
)

// crictlCommand is crictl talking to endpoint (a unix socket path) with a
// config file of its own, never the machine's /etc/crictl.yaml.
func crictlCommand(ctx context.Context, t *testing.T, endpoint string, args ...string) *exec.Cmd {
	t.Helper()
	ep := "unix://" + endpoint
	config := filepath.Join(t.TempDir(), "crictl.yaml")
	if err := os.WriteFile(config, []byte("runtime-endpoint: "+ep+"\nimage-endpoint: "+ep+"\ntimeout: 60\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return exec.CommandContext(ctx, crictlBinary(t), append([]string{"--config", config}, args...)...)
}

// TestCrictlWebSocketSessions: an unmodified crictl speaking WebSocket
// (-r websocket: v5 for exec, SPDY tunnelled in WebSocket for
// port-forward) through crishim. The exec reads what is piped to it (v5
// closes stdin), is recorded (the asciicast holds its output), crictl is
// told the command's exit code, and the audit log's ended event has it;
// the port-forward forwards and its ended event names its port, as with
// crictl's default SPDY (whose CRI request names no port either).
func TestCrictlWebSocketSessions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions")
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	d := startCrishim(t, testbed.Endpoint, "--record-sessions", "all", "--record-dir", dir, "--audit-log", auditPath)
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "crictl-ws", sleeperScript)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	script := "cat; echo crictl-ws-out; exit 5"
	cmd := crictlCommand(ctx, t, d.Socket, "exec", "-i", "-r", "websocket", ctrID, "sh", "-c", script)
	cmd.Stdin = strings.NewReader("piped-in\n")
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	// crictl exits 1 on any failed exec, naming the command's exit code.
	if !errors.As(err, &exitErr) || !strings.Contains(string(exitErr.Stderr), "command terminated with exit code 5") {
		var stderr []byte
		if exitErr != nil {
			stderr = exitErr.Stderr
		}
		t.Fatalf("crictl exec: %v; stdout %q, stderr %s; want the command's exit code 5", err, out, stderr)
	}
	if string(out) != "piped-in\ncrictl-ws-out\n" {
		t.Errorf("crictl exec printed %q", out)
	}
	var ended struct{ exit *int32 }
	eventually(t, "the exec's ended event", func() error {
		for _, ev := range readAudit(t, auditPath) {
			if ev.Stage == "ended" && ev.Kind == "exec" && strings.Join(ev.Argv, " ") == "sh -c "+script {
				ended.exit = ev.ExitCode
				if ev.Recording == "" {
					return fmt.Errorf("ended event %+v names no recording", ev)
				}
				if _, shown := castOutput(t, ev.Recording); !strings.Contains(shown, "crictl-ws-out") {
					return fmt.Errorf("recording shows %q, not the output", shown)
				}
				return nil
			}
		}
		return os.ErrNotExist
	})
	if ended.exit == nil || *ended.exit != 5 {
		t.Errorf("ended event exit code %v, want 5", ended.exit)
	}

	podID := echoPod(t, d.Endpoint)
	for _, transport := range []string{"websocket", "spdy"} {
		t.Run("port-forward over "+transport, func(t *testing.T) {
			crictlPortForward(ctx, t, d.Socket, auditPath, podID, transport)
		})
	}
}

// crictlPortForward forwards a local port to the echo server with crictl
// port-forward -r transport, echoes once, stops crictl, and checks the
// session's ended audit event names the port.
func crictlPortForward(ctx context.Context, t *testing.T, socket, auditPath, podID, transport string) {
	t.Helper()
	ended := portForwardsEnded(t, auditPath, podID)
	pf := crictlCommand(ctx, t, socket, "port-forward", "-r", transport, podID, fmt.Sprintf("0:%d", echoPort))
	var pfOut, pfErr lockedbuf.Buffer
	pf.Stdout, pf.Stderr = &pfOut, &pfErr
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	pfDone := make(chan error, 1)
	go func() { pfDone <- pf.Wait() }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = pf.Process.Signal(os.Interrupt)
			<-pfDone
		}
	}
	defer stop()
	// crictl says "Forwarding from 127.0.0.1:PORT -> 8080" once listening.
	var local string
	eventually(t, "crictl port-forward listening", func() error {
		for _, l := range strings.Split(pfOut.String(), "\n") {
			if f := strings.Fields(l); len(f) == 5 && f[0] == "Forwarding" && strings.HasPrefix(f[2], "127.0.0.1:") {
				local = f[2]
				return nil
			}
		}
		select {
		case err := <-pfDone:
			stopped = true
			t.Fatalf("crictl port-forward ended: %v\n%s", err, pfErr.String())
		default:
		}
		return fmt.Errorf("stdout %q", pfOut.String())
	})
	if err := echoOnce(local); err != nil {
		t.Fatalf("echo through crictl's port-forward: %v\n%s", err, pfErr.String())
	}
	stop()
	eventually(t, "the port-forward's ended event", func() error {
		var seen int
		for _, ev := range readAudit(t, auditPath) {
			if ev.Stage == "ended" && ev.Kind == "portforward" && ev.PodSandboxID == podID && seen < ended {
				seen++
				continue
			}
			if ev.Stage == "ended" && ev.Kind == "portforward" && ev.PodSandboxID == podID {
				if len(ev.Ports) != 1 || ev.Ports[0] != echoPort {
					return fmt.Errorf("ended event ports %v, want [%d]", ev.Ports, echoPort)
				}
				return nil
			}
		}
		return os.ErrNotExist
	})
}

// portForwardsEnded counts the ended port-forward events of podID so far.
func portForwardsEnded(t *testing.T, auditPath, podID string) int {
	t.Helper()
	n := 0
	for _, ev := range readAudit(t, auditPath) {
		if ev.Stage == "ended" && ev.Kind == "portforward" && ev.PodSandboxID == podID {
			n++
		}
	}
	return n
}
