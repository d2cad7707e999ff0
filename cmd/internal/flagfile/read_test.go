package flagfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadFileRefuses: ReadFile refuses, at once and naming the file, what a
// config file cannot be: a FIFO (whose read would block for ever), a
// symlink to /dev/zero (which never ends), a directory, a file over the
// bound; it reads a regular file of exactly the bound.
func TestReadFileRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.toml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, make([]byte, MaxFileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	exact := filepath.Join(dir, "exact.toml")
	if err := os.WriteFile(exact, make([]byte, MaxFileSize), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path, want string // want "" for success
	}{
		{fifo, "not a regular file (a FIFO)"},
		{zero, "not a regular file (a character device)"},
		{dir, "not a regular file (a directory)"},
		{big, "larger than 1048576 bytes"},
		{exact, ""},
	}
	for _, tt := range tests {
		type result struct {
			n   int
			err error
		}
		done := make(chan result, 1)
		go func() {
			data, err := ReadFile(tt.path)
			done <- result{len(data), err}
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("ReadFile(%s) blocks", tt.path)
		}
		switch {
		case tt.want == "" && r.err != nil:
			t.Errorf("ReadFile(%s): %v", tt.path, r.err)
		case tt.want == "" && r.n != MaxFileSize:
			t.Errorf("ReadFile(%s) read %d bytes, want %d", tt.path, r.n, MaxFileSize)
		case tt.want != "" && (r.err == nil || !strings.Contains(r.err.Error(), tt.want) || !strings.Contains(r.err.Error(), tt.path)):
			t.Errorf("ReadFile(%s) = %v, want an error naming it: %s", tt.path, r.err, tt.want)
		}
	}
}
