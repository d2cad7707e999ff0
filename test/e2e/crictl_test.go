package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crishim/crishim/test/buildcache"
	"github.com/crishim/crishim/test/harness"
)

// crictlVersion is the cri-tools release whose crictl the tests run, as
// operators install it: the one whose critest judges crishim
// (test/conformance), which speaks WebSocket with -r websocket.
const crictlVersion = "v1.37.0"

var (
	crictlOnce sync.Once
	crictlPath string
	crictlErr  error
)

// crictl returns the path of an unmodified crictl, built from the cri-tools
// module once per build key (as test/conformance builds critest: in the
// module as downloaded, with its own go.mod and go.sum).
func crictl(t *testing.T) string {
	t.Helper()
	crictlOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		crictlPath, crictlErr = buildCrictl(ctx)
	})
	if crictlErr != nil {
		t.Fatal(crictlErr)
	}
	return crictlPath
}

func buildCrictl(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", "sigs.k8s.io/cri-tools@"+crictlVersion).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download cri-tools: %w", err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download cri-tools: %v %s", err, m.Error)
	}
	sum, err := os.ReadFile(filepath.Join(m.Dir, "go.sum"))
	if err != nil {
		return "", fmt.Errorf("read cri-tools go.sum: %w", err)
	}
	ldflags := "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=" + strings.TrimPrefix(crictlVersion, "v")
	h := sha256.New()
	h.Write(sum)
	fmt.Fprintln(h, runtime.Version(), ldflags)
	key := crictlVersion + "-" + hex.EncodeToString(h.Sum(nil))[:12]
	dir, err := buildcache.Ensure(ctx, filepath.Join(harness.BaseDir, "crictl-bin"), key, func(ctx context.Context, tmp string) error {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags="+ldflags, "-o", filepath.Join(tmp, "crictl"), "./cmd/crictl")
		cmd.Dir = m.Dir
		// As cri-tools' release builds; the module cache is read-only.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly -buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build crictl: %w\n%s", err, harness.Tail(out, 4096))
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "crictl"), nil
}

// crictlCommand is crictl talking to endpoint (a unix socket path) with a
// config file of its own, never the machine's /etc/crictl.yaml.
func crictlCommand(ctx context.Context, t *testing.T, endpoint string, args ...string) *exec.Cmd {
	t.Helper()
	ep := "unix://" + endpoint
	config := filepath.Join(t.TempDir(), "crictl.yaml")
	if err := os.WriteFile(config, []byte("runtime-endpoint: "+ep+"\nimage-endpoint: "+ep+"\ntimeout: 60\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return exec.CommandContext(ctx, crictl(t), append([]string{"--config", config}, args...)...)
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
	var pfOut, pfErr lockedBuffer
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
