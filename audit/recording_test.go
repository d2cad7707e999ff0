package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRecordBudget: the recording directory's bound counts every file in
// it, measured at the first recording and afresh once recordRescanEvery has
// passed; writes past it fail whole; nothing is deleted, and what an
// operator removes is room again.
func TestRecordBudget(t *testing.T) {
	dir := t.TempDir()
	if NewRecordBudget(dir, 0) != nil {
		t.Fatal("a limit of 0 bounds something")
	}
	b := NewRecordBudget(dir, 100)
	now := time.Unix(1000, 0)
	b.now = func() time.Time { return now }
	later := func() { now = now.Add(recordRescanEvery) }
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
	later()
	if err := b.Admit(); !errors.Is(err, ErrRecordDirFull) {
		t.Fatalf("100 of 100 bytes used: %v, want ErrRecordDirFull", err)
	}
	if _, err := os.Stat(old); err != nil {
		t.Errorf("the oldest recording is gone: %v", err)
	}
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	later()
	if err := b.Admit(); err != nil {
		t.Errorf("an operator removed 60 bytes: %v", err)
	}
	if err := NewRecordBudget(filepath.Join(dir, "missing"), 10).Admit(); err != nil {
		t.Errorf("a directory not made yet: %v", err)
	}
}

// TestRecordBudgetScansRarely: sessions starting one after another do not
// each measure the directory (100,000 recordings take seconds to stat):
// one measure per recordRescanEvery, what is written meanwhile charged to
// the running total, which refuses once the directory is full.
func TestRecordBudgetScansRarely(t *testing.T) {
	dir := t.TempDir()
	for i := range 100 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%03d.cast", i)), make([]byte, 10), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := NewRecordBudget(dir, 2000)
	now := time.Unix(1000, 0)
	b.now = func() time.Time { return now }
	var sink bytes.Buffer
	admitted := 0
	for range 1000 { // sessions, each writing 10 bytes
		now = now.Add(time.Millisecond)
		if b.Admit() != nil {
			break
		}
		admitted++
		if _, err := b.Writer(&sink).Write(make([]byte, 10)); err != nil {
			t.Fatal(err)
		}
	}
	if b.scans != 1 || admitted != 100 {
		t.Errorf("%d sessions in 1 s: %d scans, %d admitted; want 1 scan, 100 admitted (1000 bytes on disk, 2000 allowed)", admitted, b.scans, admitted)
	}
	now = now.Add(recordRescanEvery)
	_ = b.Admit()
	if b.scans != 2 {
		t.Errorf("after %v: %d scans, want 2", recordRescanEvery, b.scans)
	}
}

// TestRecordingDeletedIsLost: a recording whose directory is removed while
// it is written (every write succeeds, into a file with no name) ends in
// ErrRecordingDeleted, which streaming counts in crishim_record_errors_total,
// with and without a budget.
func TestRecordingDeletedIsLost(t *testing.T) {
	for _, budget := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "sessions")
		f, err := CreateRecording(dir, "id", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var w io.Writer = f
		if budget {
			w = NewRecordBudget(dir, 1<<20).Writer(f)
		}
		c := NewCast(w, CastHeader{}, 0, false, time.Now)
		c.Output([]byte("before"))
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		c.Output([]byte("after"))
		if err := c.Close(); !errors.Is(err, ErrRecordingDeleted) {
			t.Errorf("budget %v: Close = %v, want ErrRecordingDeleted", budget, err)
		}
		f.Close()
	}
	// Kept, it is not lost.
	f, err := CreateRecording(t.TempDir(), "id", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := NewCast(f, CastHeader{}, 0, false, time.Now).Close(); err != nil {
		t.Errorf("a recording kept: Close = %v", err)
	}
}
