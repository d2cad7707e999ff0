package proxy

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListenCreatesSocketWithMode0660(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "crishim.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Errorf("mode %v, want socket 0660", fi.Mode())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket left behind after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestListenReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crishim.sock")
	// A socket file nobody listens on, as a crashed crishim leaves it.
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close()
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l.Close()
}

func TestListenRefusesToStealOrClobber(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.sock")
	other, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := Listen(live); err == nil || !strings.Contains(err.Error(), "running") {
		t.Errorf("live socket: %v, want an error saying something is running", err)
	}

	first := filepath.Join(dir, "crishim.sock")
	l, err := Listen(first)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := Listen(first); err == nil || !strings.Contains(err.Error(), "another crishim is running") {
		t.Errorf("second crishim on one socket: %v", err)
	}

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("regular file: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "precious" {
		t.Error("regular file was clobbered")
	}
}
