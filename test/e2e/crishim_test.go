package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
)

// daemon is a crishim process started from the binary under test.
type daemon struct {
	cmd      *exec.Cmd
	Socket   string
	Endpoint string
	Metrics  string // host:port of /metrics, /healthz, /readyz
	exited   chan struct{}
	exitErr  error

	mu  sync.Mutex
	log strings.Builder
}

// startCrishim starts crishim in front of runtimeEndpoint and waits until it
// serves. It is stopped (SIGTERM) when the test ends, unless already stopped.
func startCrishim(t *testing.T, runtimeEndpoint string, extra ...string) *daemon {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "crishim.sock")
	return startCrishimOn(t, sock, runtimeEndpoint, extra...)
}

func startCrishimOn(t *testing.T, sock, runtimeEndpoint string, extra ...string) *daemon {
	t.Helper()
	args := append([]string{
		"--listen", sock,
		"--runtime-endpoint", runtimeEndpoint,
		"--metrics-address", "127.0.0.1:0",
		"--log-format", "json",
		"--log-level", "debug",
	}, extra...)
	d := &daemon{cmd: exec.Command(filepath.Join(binDir, "crishim"), args...), Socket: sock, Endpoint: "unix://" + sock, exited: make(chan struct{})}
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	serving := make(chan string, 1)
	go d.readLog(stderr, serving)
	t.Cleanup(func() {
		d.Stop()
		if t.Failed() {
			t.Logf("crishim log:\n%s", d.Log())
		}
	})
	select {
	case addr := <-serving:
		d.Metrics = addr
	case <-d.exited:
		t.Fatalf("crishim exited at start: %v\n%s", d.exitErr, d.Log())
	case <-time.After(30 * time.Second):
		t.Fatalf("crishim did not start serving in 30s\n%s", d.Log())
	}
	return d
}

func (d *daemon) readLog(r io.Reader, serving chan<- string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		d.mu.Lock()
		d.log.WriteString(line + "\n")
		d.mu.Unlock()
		var rec struct {
			Msg     string `json:"msg"`
			Metrics string `json:"metrics"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "crishim serving" {
			select {
			case serving <- rec.Metrics:
			default:
			}
		}
	}
	d.exitErr = d.cmd.Wait()
	close(d.exited)
}

// Log is everything crishim has logged so far.
func (d *daemon) Log() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// Stop sends SIGTERM and waits for the exit; it returns the exit error.
func (d *daemon) Stop() error {
	select {
	case <-d.exited:
		return d.exitErr
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		return errors.New("crishim ignored SIGTERM for 30s")
	}
	return d.exitErr
}

// criClients connects the kubelet's own CRI client to endpoint.
func criClients(t *testing.T, endpoint string) (internalapi.RuntimeService, internalapi.ImageManagerService) {
	t.Helper()
	ctx := context.Background()
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(2 * time.Minute).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close(ctx) })
	is, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(2 * time.Minute).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rs, is
}
