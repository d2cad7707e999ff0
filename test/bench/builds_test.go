package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A build is known by its bytes: a rebuilt binary at the same path is
// another build, a copy elsewhere is told apart only by its path.
func TestBuildIDFollowsTheBytes(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "crishim")
	write := func(s string) string {
		t.Helper()
		if err := os.WriteFile(bin, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
		id, err := buildID(bin)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	first, again, rebuilt := write("one"), write("one"), write("two")
	if first != again {
		t.Errorf("the same bytes gave %q and %q", first, again)
	}
	if first == rebuilt {
		t.Errorf("other bytes at the same path gave the same %q", first)
	}
	if _, err := buildID(filepath.Join(dir, "missing")); err == nil {
		t.Error("no error for a missing binary")
	}
}
