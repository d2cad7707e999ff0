package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// crioBinCacheDir holds one directory of CRI-O binaries per build key.
var crioBinCacheDir = filepath.Join(BaseDir, "crio-bin")

// crioBuildTags are CRI-O's own release tags minus what needs libraries Debian's CRI-O
// dependencies lack (ostree, gpgme, btrfs, devicemapper); seccomp needs libseccomp-dev.
const crioBuildTags = "containers_image_ostree_stub containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper seccomp"

// crioPackages are the Go packages built from ./criobuild, one binary each: crio itself, the
// image loader and the runc wrapper (see their doc comments).
var crioPackages = []string{"github.com/cri-o/cri-o/cmd/crio", "./ociload", "./runcwrap"}

// crioBuildFiles are the files of ./criobuild that decide the build's output.
var crioBuildFiles = []string{"go.mod", "go.sum", "tools.go", "ociload/main.go", "runcwrap/main.go"}

// pinnsCommand compiles pinns, CRI-O's namespace pinner, which is C in CRI-O's source.
// Static, as CRI-O's release builds it, so it needs nothing at run time.
var pinnsCommand = []string{"cc", "-std=c99", "-Os", "-static", "-o"}

// crioBins is a directory holding a CRI-O build.
type crioBins struct {
	Dir string
}

func (b crioBins) crio() string     { return filepath.Join(b.Dir, "crio") }
func (b crioBins) pinns() string    { return filepath.Join(b.Dir, "pinns") }
func (b crioBins) ociload() string  { return filepath.Join(b.Dir, "ociload") }
func (b crioBins) runcwrap() string { return filepath.Join(b.Dir, "runcwrap") }

// complete reports whether the build is there; a build writes its directory under a
// temporary name and renames it whole, so a directory with crio in it is complete.
func (b crioBins) complete() bool {
	for _, p := range []string{b.crio(), b.pinns(), b.ociload(), b.runcwrap()} {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

// criobuildDir finds ./criobuild from the source tree this package was compiled from, so
// that tests (run in their package directory) and commands run anywhere in the checkout
// find the same module.
func criobuildDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate test/harness/criobuild: no caller information")
	}
	dir := filepath.Join(filepath.Dir(file), "criobuild")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("locate test/harness/criobuild: %w", err)
	}
	return dir, nil
}

// crioBuildKey names a build by what decides its output: the wrapper module's files, the Go
// toolchain, the tags and the pinns command.
func crioBuildKey(dir string) (string, error) {
	h := sha256.New()
	for _, name := range crioBuildFiles {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("read criobuild/%s: %w", name, err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	fmt.Fprintln(h, runtime.Version(), crioBuildTags, strings.Join(pinnsCommand, " "))
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// cachedCRIOBins returns the binaries of the current build key, built or not.
func cachedCRIOBins() (crioBins, error) {
	src, err := criobuildDir()
	if err != nil {
		return crioBins{}, err
	}
	key, err := crioBuildKey(src)
	if err != nil {
		return crioBins{}, err
	}
	return crioBins{Dir: filepath.Join(crioBinCacheDir, key)}, nil
}

// ensureCRIOBinaries returns the cached CRI-O build, building it first if this key was never
// built. A cold build downloads about 215 MB of modules and compiles CRI-O (minutes on two
// cores); a warm call costs a hash of five files. Concurrent callers wait for one build.
func ensureCRIOBinaries(ctx context.Context) (crioBins, error) {
	b, err := cachedCRIOBins()
	if err != nil || b.complete() {
		return b, err
	}
	unlock, err := lockFile(ctx, filepath.Join(crioBinCacheDir, "build.lock"))
	if err != nil {
		return crioBins{}, err
	}
	defer unlock()
	if b.complete() { // built by whoever held the lock before us
		return b, nil
	}
	src, err := criobuildDir()
	if err != nil {
		return crioBins{}, err
	}
	if err := buildCRIO(ctx, src, b.Dir); err != nil {
		return crioBins{}, err
	}
	return b, nil
}

// buildCRIO builds every crioPackages binary and pinns into dst, through a temporary
// directory renamed whole, and prunes builds of other keys.
func buildCRIO(ctx context.Context, src, dst string) error {
	tmp := dst + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("clear %s: %w", tmp, err)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	start := time.Now()
	// One go build for all three, so the containers/* packages they share compile once.
	// CGO for libseccomp (and containers/storage's overlay driver); -mod=readonly because the
	// module files are the build key. Only cri-o/cri-o v1.34.0 itself is fetched by version;
	// its go.sum, copied into ./criobuild, vouches for the rest (two of its sums are not in
	// the checksum database).
	args := append([]string{"build", "-trimpath", "-ldflags=-s -w", "-tags", crioBuildTags, "-o", tmp + "/"}, crioPackages...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=-mod=readonly -buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build CRI-O in %s: %w\n%s", src, err, tail(out, 4096))
	}
	if err := buildPinns(ctx, src, filepath.Join(tmp, "pinns")); err != nil {
		return err
	}
	// The harness has no logger; the cold build's time stays next to its output for whoever
	// wonders what a cache miss costs.
	_ = os.WriteFile(filepath.Join(tmp, "build-time"), []byte(time.Since(start).Round(time.Second).String()+"\n"), 0o644)
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("install CRI-O binaries: %w", err)
	}
	dirs, _ := os.ReadDir(crioBinCacheDir)
	for _, d := range dirs {
		if p := filepath.Join(crioBinCacheDir, d.Name()); d.IsDir() && p != dst {
			_ = os.RemoveAll(p)
		}
	}
	return nil
}

// buildPinns compiles pinns from the CRI-O module source the go build just used.
func buildPinns(ctx context.Context, src, out string) error {
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/cri-o/cri-o")
	list.Dir = src
	list.Env = append(os.Environ(), "GOFLAGS=-mod=readonly")
	dir, err := list.Output()
	if err != nil {
		return fmt.Errorf("find the CRI-O module source: %w", err)
	}
	sources, err := filepath.Glob(filepath.Join(strings.TrimSpace(string(dir)), "pinns", "src", "*.c"))
	if err != nil || len(sources) == 0 {
		return fmt.Errorf("find pinns sources in %s: %v", strings.TrimSpace(string(dir)), err)
	}
	args := append(append(pinnsCommand[1:len(pinnsCommand):len(pinnsCommand)], out), sources...)
	if b, err := exec.CommandContext(ctx, pinnsCommand[0], args...).CombinedOutput(); err != nil {
		return fmt.Errorf("compile pinns: %w\n%s", err, tail(b, 4096))
	}
	return nil
}
