package main

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// executeWithin runs crishim's command line and fails the test if it has
// not returned within a generous bound (a hang is the defect).
func executeWithin(t *testing.T, args []string) int {
	t.Helper()
	done := make(chan int, 1)
	go func() { done <- execute(args, io.Discard, io.Discard) }()
	select {
	case code := <-done:
		return code
	case <-time.After(30 * time.Second):
		t.Fatalf("crishim %v did not return", args)
		return -1
	}
}

// TestStartRefusesFIFOAuditLog: --audit-log naming a FIFO fails start
// (exit 1) at once, before the socket exists, instead of blocking in open.
func TestStartRefusesFIFOAuditLog(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "audit.log")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "crishim.sock")
	code := executeWithin(t, []string{"--config", "", "--listen", sock, "--runtime-endpoint", "unix://" + filepath.Join(dir, "runtime.sock"),
		"--containerd-address", "", "--metrics-address", "", "--streaming-address", "", "--audit-log", fifo})
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Errorf("%s exists after a failed start", sock)
	}
}

// TestListenForms: --listen takes /path and unix:///path, as the runtime
// endpoints do; a relative one is a usage error (exit 2), found before
// anything starts.
func TestListenForms(t *testing.T) {
	for _, arg := range []string{"/run/x/../crishim/c.sock", "unix:///run/crishim/c.sock"} {
		cfg, err := parseFlags([]string{"--listen", arg})
		if err != nil || cfg.listen != "/run/crishim/c.sock" {
			t.Errorf("--listen %s: %q, %v; want /run/crishim/c.sock", arg, cfg.listen, err)
		}
	}
	for _, arg := range []string{"/abs.sock", "unix:///abs.sock"} {
		cfg, err := parseFlags([]string{"--runtime-endpoint", arg, "--image-endpoint", arg})
		if err != nil || cfg.target.containerdAddress != "/abs.sock" {
			t.Errorf("--runtime-endpoint %s: containerd address %q, %v; want /abs.sock", arg, cfg.target.containerdAddress, err)
		}
	}
	dir := t.TempDir()
	code := executeWithin(t, []string{"--config", "", "--listen", "relative.sock", "--runtime-endpoint", "unix://" + filepath.Join(dir, "runtime.sock"),
		"--containerd-address", "", "--metrics-address", "", "--streaming-address", ""})
	if code != 2 {
		t.Errorf("--listen relative.sock: exit %d, want 2", code)
	}
}

// TestRefuseOwnSocket: a runtime or image endpoint naming crishim's own
// socket is refused with what to do: the same path once cleaned, or the
// same socket file reached through a symlinked directory.
func TestRefuseOwnSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "real", "crishim.sock")
	if err := os.Mkdir(filepath.Dir(sock), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Symlink("real", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	viaLink := filepath.Join(dir, "link", "crishim.sock")
	tests := [][]string{
		{"--listen", "/run/crishim/crishim.sock", "--runtime-endpoint", "unix:///run/crishim/../crishim/crishim.sock"},
		{"--listen", "unix:///run/crishim/crishim.sock", "--image-endpoint", "/run/crishim/crishim.sock"},
		{"--listen", sock, "--runtime-endpoint", "unix://" + viaLink},
	}
	for _, args := range tests {
		_, err := parseFlags(args)
		if err == nil || !strings.Contains(err.Error(), "is crishim's own socket") || !strings.Contains(err.Error(), "point it at the runtime's socket") {
			t.Errorf("%v: %v, want a refusal saying what to do", args, err)
		}
	}
	if _, err := parseFlags([]string{"--listen", sock, "--runtime-endpoint", "unix:///run/containerd/containerd.sock"}); err != nil {
		t.Errorf("another socket refused: %v", err)
	}
}
