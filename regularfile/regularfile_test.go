package regularfile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestOpen: a regular file opens; a FIFO (read or write: neither waits for a peer), a
// directory and a character device are refused with a NotRegularError naming what they are.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		flag int
		kind string // "": opens
	}{
		{file, os.O_RDONLY, ""},
		{file, os.O_WRONLY | os.O_APPEND, ""},
		{fifo, os.O_RDONLY, "a FIFO"},
		{fifo, os.O_WRONLY | os.O_APPEND, "a FIFO"},
		{dir, os.O_RDONLY, "a directory"},
		{dir, os.O_WRONLY | os.O_APPEND, "a directory"},
		{"/dev/zero", os.O_RDONLY, "a character device"},
	}
	for _, tt := range tests {
		f, err := Open(tt.path, tt.flag, 0o600)
		if tt.kind == "" {
			if err != nil {
				t.Errorf("Open(%s, %#o): %v", tt.path, tt.flag, err)
				continue
			}
			f.Close()
			continue
		}
		var nr *NotRegularError
		if !errors.As(err, &nr) || nr.Kind != tt.kind || nr.Path != tt.path {
			t.Errorf("Open(%s, %#o) = %v; want NotRegularError of %s", tt.path, tt.flag, err, tt.kind)
		}
		if f != nil {
			f.Close()
		}
	}
}
