package allowlist

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestPolicyEnforced(t *testing.T) {
	tests := []struct {
		flag     string
		file     string // content; "-" for no file
		enforced bool
		allowed  bool // busybox:latest
		governs  string
	}{
		{"", "-", false, false, "--debug-image-allowlist"},
		{"busybox", "-", true, true, "--debug-image-allowlist"},
		{"alpine", "-", true, false, "--debug-image-allowlist"},
		{"", "busybox\n", true, true, "--debug-image-allowlist-file "},
		{"", "", true, false, "--debug-image-allowlist-file "},
		{"alpine", "busybox", true, true, "--debug-image-allowlist and --debug-image-allowlist-file "},
	}
	for _, tt := range tests {
		file := ""
		if tt.file != "-" {
			file = filepath.Join(t.TempDir(), "allow")
			if err := os.WriteFile(file, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		p, err := New(tt.flag, file)
		if err != nil {
			t.Fatal(err)
		}
		_, allowed := p.Match("busybox")
		if p.Enforced() != tt.enforced || allowed != tt.allowed || !strings.HasPrefix(p.Governs(), tt.governs) {
			t.Errorf("flag %q file %q: enforced %v allowed %v governs %q; want %v %v %q",
				tt.flag, tt.file, p.Enforced(), allowed, p.Governs(), tt.enforced, tt.allowed, tt.governs)
		}
	}
	var nilPolicy *Policy
	if nilPolicy.Enforced() {
		t.Error("a nil policy enforces")
	}
}

func TestPolicyStartErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("ok\nNOT OK\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ flag, file, want string }{
		{"", filepath.Join(dir, "missing"), "no such file"},
		{"", bad, "line 2"},
		{"x@y", "", "--debug-image-allowlist: pattern"},
	} {
		if _, err := New(tt.flag, tt.file); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%q, %q) = %v, want %q", tt.flag, tt.file, err, tt.want)
		}
	}
}

// TestPolicyReloads: the file is re-read when it changes and on SIGHUP; a
// bad file keeps the list in force.
func TestPolicyReloads(t *testing.T) {
	file := filepath.Join(t.TempDir(), "allow")
	write := func(s string) {
		t.Helper()
		// Renamed over the old one, as a ConfigMap update does.
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("busybox")
	p, err := New("", file)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { defer close(done); p.Watch(ctx, 10*time.Millisecond, hup, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() { cancel(); <-done })

	allows := func(name string) func() bool {
		return func() bool { _, ok := p.Match(name); return ok }
	}
	write("alpine")
	waitFor(t, "alpine allowed after the file changed", allows("alpine"))
	if _, ok := p.Match("busybox"); ok {
		t.Error("busybox still allowed")
	}
	write("alpine\nNOT VALID\n")
	time.Sleep(50 * time.Millisecond)
	if _, ok := p.Match("alpine"); !ok {
		t.Error("a bad file replaced the list in force")
	}

	// SIGHUP re-reads even a file whose stamp did not change.
	p.mu.Lock()
	if err := os.WriteFile(file, []byte("debian"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(file)
	p.seen = stampOf(fi)
	p.mu.Unlock()
	hup <- syscall.SIGHUP
	waitFor(t, "debian allowed after SIGHUP", allows("debian"))
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
