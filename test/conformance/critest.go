package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/crishim/crishim/test/buildcache"
	"github.com/crishim/crishim/test/harness"
)

// critestVersion is the cri-tools release whose critest judges crishim: the newest the Go
// module proxy serves (`go list -m -versions sigs.k8s.io/cri-tools`). Its specs, and so the
// images in images.go, belong to this version.
const critestVersion = "v1.37.0"

// critestCacheDir holds one directory per build key.
var critestCacheDir = filepath.Join(harness.BaseDir, "critest-bin")

// ensureCritest returns the path of a critest binary for critestVersion, building it first if
// this key was never built. critest is not a command but a ginkgo test binary (cmd/critest has
// only cri_test.go), so it is built as cri-tools' own Makefile does, with `go test -c`, and in
// the cri-tools module as downloaded: its own go.mod and go.sum decide every dependency, as in
// a release build, and crishim's module never depends on cri-tools.
func ensureCritest(ctx context.Context, log *slog.Logger) (string, error) {
	src, err := downloadModule(ctx, "sigs.k8s.io/cri-tools@"+critestVersion)
	if err != nil {
		return "", err
	}
	key, err := critestKey(src)
	if err != nil {
		return "", err
	}
	dir, err := buildcache.Ensure(ctx, critestCacheDir, key, func(ctx context.Context, tmp string) error {
		log.Info("building critest (cold: minutes; cached after)", "version", critestVersion, "into", filepath.Join(critestCacheDir, key))
		start := time.Now()
		cmd := exec.CommandContext(ctx, "go", "test", "-c", "-trimpath", "-ldflags="+critestLDFlags(),
			"-o", filepath.Join(tmp, "critest"), "./cmd/critest")
		cmd.Dir = src
		// CGO off as in cri-tools' release builds; -mod=readonly because the module cache
		// is read-only and its go.sum is complete.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly -buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go test -c critest in %s: %w\n%s", src, err, harness.Tail(out, 4096))
		}
		log.Info("built critest", "took", time.Since(start).Round(time.Second))
		return nil
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "critest"), nil
}

// critestLDFlags stamps the version critest prints, as cri-tools' Makefile does.
func critestLDFlags() string {
	return "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=" + strings.TrimPrefix(critestVersion, "v")
}

// critestKey names a build by what decides its output: the version, its go.sum, the Go
// toolchain and the link flags.
func critestKey(src string) (string, error) {
	sum, err := os.ReadFile(filepath.Join(src, "go.sum"))
	if err != nil {
		return "", fmt.Errorf("read cri-tools go.sum: %w", err)
	}
	h := sha256.New()
	h.Write(sum)
	fmt.Fprintln(h, runtime.Version(), critestLDFlags())
	return critestVersion + "-" + hex.EncodeToString(h.Sum(nil))[:12], nil
}

// downloadModule fetches module@version into the module cache (a no-op when it is there) and
// returns its directory.
func downloadModule(ctx context.Context, module string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", module).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w", module, exitDetail(err))
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	if m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", module, m.Error)
	}
	return m.Dir, nil
}

// exitDetail adds a failed command's stderr to its error.
func exitDetail(err error) error {
	if ee, ok := err.(*exec.ExitError); ok && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(harness.Tail(ee.Stderr, 2048)))
	}
	return err
}
