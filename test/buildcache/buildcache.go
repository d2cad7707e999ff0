// Package buildcache keeps what the test bed builds from the Go module proxy (the Kubernetes
// binaries, critest) on the machine, one directory per build key, so that only the first run
// of a key pays for the build.
package buildcache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/crishim/crishim/test/harness"
)

// lockName is the lock file in a cache directory; it is never removed (see harness.LockFile).
const lockName = "build.lock"

// Ensure returns dir/key, running build first if that directory does not exist. build writes
// into a temporary directory that is renamed to dir/key when it succeeds, so a directory that
// exists is complete; concurrent callers wait on a lock for one build. After a build, every
// other key's directory is removed: builds are large, and a key changes only when its inputs do.
func Ensure(ctx context.Context, dir, key string, build func(ctx context.Context, tmp string) error) (string, error) {
	dst := filepath.Join(dir, key)
	if Exists(dst) {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	unlock, err := harness.LockFile(ctx, filepath.Join(dir, lockName))
	if err != nil {
		return "", err
	}
	defer unlock()
	if Exists(dst) { // built by whoever held the lock before us
		return dst, nil
	}
	tmp := dst + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", fmt.Errorf("clear %s: %w", tmp, err)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", tmp, err)
	}
	if err := build(ctx, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("install %s: %w", dst, err)
	}
	pruneOthers(dir, key)
	return dst, nil
}

// Exists reports whether a build's directory is there (and so complete).
func Exists(dst string) bool {
	fi, err := os.Stat(dst)
	return err == nil && fi.IsDir()
}

// pruneOthers removes the other keys' directories; a process still running a binary from one
// keeps its open file until it exits.
func pruneOthers(dir, keep string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != keep && e.Name() != lockName {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}
