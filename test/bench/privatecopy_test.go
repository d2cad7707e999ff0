package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Each process gets a file of its own with the binary's bytes, one it can
// run: files, not links, so that no two share the page cache's pages.
func TestPrivateCopiesAreFilesOfTheirOwn(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var infos []os.FileInfo
	for _, name := range []string{"a", "b"} {
		path, err := privateCopy(bin, dir, name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := os.ReadFile(bin); !bytes.Equal(got, want) {
			t.Errorf("%s: %q, want the binary's bytes %q", name, got, want)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o100 == 0 {
			t.Errorf("%s: mode %v, not executable", name, fi.Mode())
		}
		infos = append(infos, fi)
	}
	orig, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(infos[0], orig) || os.SameFile(infos[1], orig) || os.SameFile(infos[0], infos[1]) {
		t.Error("a copy is the binary itself or the other copy")
	}
}
