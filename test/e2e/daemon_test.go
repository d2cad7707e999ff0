package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCrishimctlStatus reports the runtime behind crishim, as text and JSON.
func TestCrishimctlStatus(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	ctl := filepath.Join(binDir, "crishimctl")
	out, err := exec.Command(ctl, "--endpoint", d.Endpoint, "status", "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("crishimctl status -o json: %v\n%s", err, out)
	}
	var st struct {
		Version         string `json:"version"`
		RuntimeReady    bool   `json:"runtimeReady"`
		RuntimeName     string `json:"runtimeName"`
		RuntimeVersion  string `json:"runtimeVersion"`
		RuntimeEndpoint string `json:"runtimeEndpoint"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, out)
	}
	if !st.RuntimeReady || st.RuntimeName != testbed.RuntimeName || st.RuntimeVersion == "" || st.Version == "" || st.RuntimeEndpoint != testbed.Endpoint {
		t.Errorf("status = %+v", st)
	}
	out, err = exec.Command(ctl, "--endpoint", d.Endpoint, "status").CombinedOutput()
	if err != nil || !strings.Contains(string(out), testbed.RuntimeName+" "+st.RuntimeVersion) {
		t.Errorf("crishimctl status: %v\n%s", err, out)
	}
	out, err = exec.Command(ctl, "--endpoint", "unix://"+filepath.Join(t.TempDir(), "none.sock"), "--timeout", "5s", "status").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Unavailable") {
		t.Errorf("crishimctl status without crishim: %v\n%s", err, out)
	}
}

// TestDaemonSocketLifecycle: a second crishim on a live socket is refused
// and changes nothing; SIGTERM exits 0 and removes the socket.
func TestDaemonSocketLifecycle(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	fi, err := os.Stat(d.Socket)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket %v, %v", fi, err)
	}
	second := exec.Command(filepath.Join(binDir, "crishim"), "--listen", d.Socket,
		"--runtime-endpoint", testbed.Endpoint, "--metrics-address", "")
	out, err := second.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another crishim is running") {
		t.Errorf("second crishim on the same socket: %v\n%s", err, out)
	}
	if _, err := os.Stat(d.Socket); err != nil {
		t.Fatalf("the refused second crishim removed the socket: %v", err)
	}
	if err := d.Stop(); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, d.Log())
	}
	if _, err := os.Stat(d.Socket); !os.IsNotExist(err) {
		t.Errorf("socket left after SIGTERM: %v", err)
	}
}

// TestBadFlagsFailClearly: a bad endpoint is a startup error naming the flag. (A bare
// absolute path is a good one, as for crictl.) A crishim that starts instead is killed at
// the bound, so a regression fails the test rather than hanging the suite.
func TestBadFlagsFailClearly(t *testing.T) {
	for _, args := range [][]string{
		{"--runtime-endpoint", "relative/containerd.sock"},
		{"--runtime-endpoint", "tcp://127.0.0.1:1"},
		{"--image-endpoint", "unix://relative"},
		{"--log-format", "xml"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, filepath.Join(binDir, "crishim"), args...).CombinedOutput()
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), args[0]) {
			t.Errorf("crishim %v: %v\n%s", args, err, out)
		}
	}
}
