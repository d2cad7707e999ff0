package buildcache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestEnsureBuildsOnceAndPrunesOtherKeys(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	builds := 0
	build := func(_ context.Context, tmp string) error {
		builds++
		return os.WriteFile(filepath.Join(tmp, "bin"), []byte("x"), 0o755)
	}
	old, err := Ensure(ctx, dir, "old", build)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(ctx, dir, "new", func(context.Context, string) error { return errors.New("broken") }); err == nil {
		t.Fatal("a failed build succeeded")
	}
	if Exists(filepath.Join(dir, "new")) || Exists(filepath.Join(dir, "new.tmp")) {
		t.Error("a failed build left a directory")
	}
	for range 2 {
		got, err := Ensure(ctx, dir, "new", build)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(got, "bin")); err != nil {
			t.Error(err)
		}
	}
	if builds != 2 {
		t.Errorf("%d builds, want one per key", builds)
	}
	if Exists(old) {
		t.Error("the other key's build was not pruned")
	}
}
