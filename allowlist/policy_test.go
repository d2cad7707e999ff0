package allowlist

import (
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
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("docker.io/library/busybox\n", 1<<20/26+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	// A FIFO, a device and a directory are refused at once (a FIFO would
	// block the read for ever), as is a file over 1 MiB.
	for _, tt := range []struct{ flag, file, want string }{
		{"", fifo, fifo + " is not a regular file"},
		{"", "/dev/zero", "/dev/zero is not a regular file"},
		{"", dir, dir + " is not a regular file"},
		{"", big, big + " is larger than 1048576 bytes"},
		{"", filepath.Join(dir, "missing"), "no such file"},
		{"", bad, "line 2"},
		{"x@y", "", "--debug-image-allowlist: pattern"},
	} {
		done := make(chan error, 1)
		go func() { _, err := New(tt.flag, tt.file); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New(%q, %q) = %v, want %q", tt.flag, tt.file, err, tt.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("New(%q, %q) blocks", tt.flag, tt.file)
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
	allows := func(name string) func() bool {
		return func() bool { _, ok := p.Match(name); return ok }
	}
	if changed, err := p.Refresh(); changed || err != nil {
		t.Errorf("Refresh of an unchanged file: %v, %v", changed, err)
	}
	write("alpine")
	if changed, err := p.Refresh(); !changed || err != nil {
		t.Errorf("Refresh of a changed file: %v, %v", changed, err)
	}
	if !allows("alpine")() {
		t.Error("alpine not allowed after the file changed")
	}
	if _, ok := p.Match("busybox"); ok {
		t.Error("busybox still allowed")
	}
	write("alpine\nNOT VALID\n")
	if _, err := p.Refresh(); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("Refresh of a bad file: %v", err)
	}
	if _, ok := p.Match("alpine"); !ok {
		t.Error("a bad file replaced the list in force")
	}

	// Reload (SIGHUP) re-reads even a file whose stamp did not change.
	if err := os.WriteFile(file, []byte("debian"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(file)
	s := *p.cur.Load()
	s.seen = stampOf(fi)
	p.cur.Store(&s)
	if changed, err := p.Refresh(); changed || err != nil {
		t.Errorf("Refresh of a file of the same stamp: %v, %v", changed, err)
	}
	if err := p.Reload(); err != nil || !allows("debian")() {
		t.Errorf("Reload: %v; debian allowed %v", err, allows("debian")())
	}

	// Replace puts another policy's patterns and file in force.
	q, err := New("registry.corp/*", "")
	if err != nil {
		t.Fatal(err)
	}
	p.Replace(q)
	if allows("debian")() || !allows("registry.corp/x")() || p.File() != "" {
		t.Errorf("after Replace: debian %v, registry.corp/x %v, file %q", allows("debian")(), allows("registry.corp/x")(), p.File())
	}
}
