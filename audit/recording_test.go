package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestRecordBudget: the recording directory's bound counts every file in
// it, measured afresh at each new recording; writes past it fail whole;
// nothing is deleted, and what an operator removes is room again.
func TestRecordBudget(t *testing.T) {
	dir := t.TempDir()
	if NewRecordBudget(dir, 0) != nil {
		t.Fatal("a limit of 0 bounds something")
	}
	b := NewRecordBudget(dir, 100)
	old := filepath.Join(dir, "old.cast")
	if err := os.WriteFile(old, bytes.Repeat([]byte("x"), 60), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.Admit(); err != nil {
		t.Fatalf("60 of 100 bytes used: %v", err)
	}
	var got bytes.Buffer
	w := b.Writer(&got)
	if n, err := w.Write(make([]byte, 30)); n != 30 || err != nil {
		t.Fatalf("30 more bytes: %d, %v", n, err)
	}
	if n, err := w.Write(make([]byte, 11)); n != 0 || !errors.Is(err, ErrRecordDirFull) {
		t.Fatalf("past the limit: %d, %v; want nothing written and ErrRecordDirFull", n, err)
	}
	if n, err := w.Write(make([]byte, 10)); n != 10 || err != nil {
		t.Fatalf("up to the limit: %d, %v", n, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "new.cast"), make([]byte, 40), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := b.Admit(); !errors.Is(err, ErrRecordDirFull) {
		t.Fatalf("100 of 100 bytes used: %v, want ErrRecordDirFull", err)
	}
	if _, err := os.Stat(old); err != nil {
		t.Errorf("the oldest recording is gone: %v", err)
	}
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	if err := b.Admit(); err != nil {
		t.Errorf("an operator removed 60 bytes: %v", err)
	}
	if err := NewRecordBudget(filepath.Join(dir, "missing"), 10).Admit(); err != nil {
		t.Errorf("a directory not made yet: %v", err)
	}
}
