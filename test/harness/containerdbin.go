package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// containerdVersion is the containerd RuntimeContainerd builds; the version stamp makes
// CRI Version report it (unstamped, containerd calls itself "2.4.2+unknown").
const containerdVersion = "v2.4.2"

// containerdModule is the module the binaries are installed from.
const containerdModule = "github.com/containerd/containerd/v2"

// containerdTags leave out the snapshotters a test bed never uses (and their cgo-free stubs
// build without their C libraries) and the CLI's docs generator. The shim additionally gets
// no_grpc: it serves ttrpc only, as upstream's release build makes it.
var (
	containerdTags = []string{"urfave_cli_no_docs", "no_btrfs", "no_devmapper", "no_zfs"}
	shimTags       = append(append([]string(nil), containerdTags...), "no_grpc")
)

// containerdBinCache holds one directory of binaries per build key.
var containerdBinCache = filepath.Join(BaseDir, "containerd-bin")

// containerdBinaries is a directory holding containerd, ctr and containerd-shim-runc-v2.
type containerdBinaries struct{ dir string }

func (b containerdBinaries) path(name string) string { return filepath.Join(b.dir, name) }

var containerdCommands = []string{"containerd", "ctr", "containerd-shim-runc-v2"}

// complete reports whether every binary is there; a build writes its directory under a
// temporary name and renames it whole, so a directory that exists is complete.
func (b containerdBinaries) complete() bool {
	for _, c := range containerdCommands {
		if _, err := os.Stat(b.path(c)); err != nil {
			return false
		}
	}
	return true
}

// containerdLdflags stamps the version where containerd's version package reads it.
func containerdLdflags() string {
	return "-X " + containerdModule + "/version.Version=" + containerdVersion
}

// containerdBuildKey names a build by what decides its output: version, tags, link flags
// and the Go toolchain (the one this package was compiled with, which is the `go` that
// builds, as for the Kubernetes binaries of test/node).
func containerdBuildKey() string {
	h := sha256.New()
	fmt.Fprintln(h, containerdVersion, strings.Join(containerdTags, ","), strings.Join(shimTags, ","), containerdLdflags(), runtime.Version())
	return containerdVersion + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// cachedContainerd is where the binaries of the current key are (or will be).
func cachedContainerd() containerdBinaries {
	return containerdBinaries{dir: filepath.Join(containerdBinCache, containerdBuildKey())}
}

// ensureContainerd returns the cached binaries, building them first if this key was never
// built: about a minute cold on two idle cores with a warm module cache (see
// docs/testing.md), a stat when cached. Concurrent callers (the packages of `go test ./...`)
// wait for one build.
func ensureContainerd(ctx context.Context) (containerdBinaries, error) {
	b := cachedContainerd()
	if b.complete() {
		return b, nil
	}
	unlock, err := lockFile(ctx, filepath.Join(containerdBinCache, "build.lock"))
	if err != nil {
		return b, err
	}
	defer unlock()
	if b.complete() { // built by whoever held the lock before us
		return b, nil
	}
	slog.Info("building containerd (cold: a minute or more; cached after)", "version", containerdVersion, "into", b.dir)
	start := time.Now()
	if err := buildContainerd(ctx, b.dir); err != nil {
		return b, err
	}
	slog.Info("built containerd", "version", containerdVersion, "took", time.Since(start).Round(time.Second))
	return b, nil
}

// buildContainerd installs the three commands into dst.tmp and renames it to dst.
func buildContainerd(ctx context.Context, dst string) error {
	tmp := dst + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("clear %s: %w", tmp, err)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	at := func(cmd string) string { return containerdModule + "/cmd/" + cmd + "@" + containerdVersion }
	for _, step := range []struct {
		tags []string
		pkgs []string
	}{
		// containerd and ctr in one go install, so the packages they share compile once.
		{containerdTags, []string{at("containerd"), at("ctr")}},
		{shimTags, []string{at("containerd-shim-runc-v2")}},
	} {
		args := append([]string{"install", "-trimpath", "-ldflags=" + containerdLdflags(), "-tags=" + strings.Join(step.tags, " ")}, step.pkgs...)
		cmd := exec.CommandContext(ctx, "go", args...)
		// pkg@version ignores any enclosing module; run in the empty tmp dir anyway so no
		// go.work or go.mod of the caller's tree is consulted. GOFLAGS is cleared so a
		// caller's -mod=vendor cannot break it.
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOBIN="+tmp, "GOFLAGS=", "GOWORK=off")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail([]byte(out.String()), 4096))
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("install containerd binaries: %w", err)
	}
	pruneOtherContainerd(dst)
	return nil
}

// pruneOtherContainerd removes the cached builds of other keys; a slot still running one
// keeps its open binaries until it stops.
func pruneOtherContainerd(keep string) {
	dirs, _ := filepath.Glob(filepath.Join(containerdBinCache, "v*"))
	for _, d := range dirs {
		if d != keep {
			_ = os.RemoveAll(d)
		}
	}
}
