package node

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
	"slices"
	"strings"
	"time"

	"github.com/crishim/crishim/test/buildcache"
	"github.com/crishim/crishim/test/harness"
)

// kubeCommands are built from k8s.io/kubernetes/cmd, etcd from ./etcd.
var kubeCommands = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"}

// Components are the commands built from ./kubebuild.
var Components = append(slices.Clone(kubeCommands), "etcd")

// binCacheDir holds one directory of binaries per build key.
var binCacheDir = filepath.Join(harness.BaseDir, "kube-bin")

// Binaries is a directory holding every Component.
type Binaries struct {
	Dir     string
	Version string // the Kubernetes release, e.g. v1.37.2
}

// Path is the full path of a component.
func (b Binaries) Path(name string) string { return filepath.Join(b.Dir, name) }

// kubebuildDir finds ./kubebuild from the source tree this package was compiled from, so
// that tests (run in their package directory) and `go run` commands (run anywhere in the
// checkout) find the same module.
func kubebuildDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate test/node/kubebuild: no caller information")
	}
	dir := filepath.Join(filepath.Dir(file), "kubebuild")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("locate test/node/kubebuild: %w", err)
	}
	return dir, nil
}

// manifestsDir is packaging/kubernetes of the checkout this package was compiled from.
func manifestsDir() (string, error) {
	src, err := kubebuildDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(src, "..", "..", "..", "packaging", "kubernetes")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("locate packaging/kubernetes: %w", err)
	}
	return filepath.Clean(dir), nil
}

// buildKey names a build by what decides its output: the module files and sources of
// ./kubebuild and the Go toolchain.
func buildKey(dir string) (version, key string, err error) {
	h := sha256.New()
	for _, name := range []string{"go.mod", "go.sum", "tools.go", "etcd/main.go"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", "", fmt.Errorf("read kubebuild/%s: %w", name, err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
		if name == "go.mod" {
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "k8s.io/kubernetes" {
					version = f[1]
				}
			}
		}
	}
	if version == "" {
		return "", "", fmt.Errorf("kubebuild/go.mod requires no k8s.io/kubernetes version")
	}
	fmt.Fprintln(h, runtime.Version(), ldflags(version))
	return version, version + "-" + hex.EncodeToString(h.Sum(nil))[:12], nil
}

// CachedBinaries returns the binaries of the current build key and whether they are built.
func CachedBinaries() (Binaries, bool, error) {
	src, err := kubebuildDir()
	if err != nil {
		return Binaries{}, false, err
	}
	version, key, err := buildKey(src)
	if err != nil {
		return Binaries{}, false, err
	}
	b := Binaries{Dir: filepath.Join(binCacheDir, key), Version: version}
	return b, b.complete(), nil
}

// EnsureBinaries returns the cached binaries, building them first if this key was never built.
// A cold build compiles Kubernetes (many minutes on two cores; progress goes to log); a warm
// call costs a hash of four files. Concurrent callers wait for one build.
func EnsureBinaries(ctx context.Context, log *slog.Logger) (Binaries, error) {
	b, ok, err := CachedBinaries()
	if err != nil || ok {
		return b, err
	}
	src, err := kubebuildDir()
	if err != nil {
		return Binaries{}, err
	}
	_, err = buildcache.Ensure(ctx, binCacheDir, filepath.Base(b.Dir), func(ctx context.Context, tmp string) error {
		log.Info("building Kubernetes binaries (cold: many minutes; cached after)", "version", b.Version, "into", b.Dir)
		start := time.Now()
		if err := build(ctx, src, tmp, b.Version); err != nil {
			return err
		}
		log.Info("built Kubernetes binaries", "version", b.Version, "took", time.Since(start).Round(time.Second))
		return nil
	})
	return b, err
}

// complete reports whether every component is there; a build writes its directory under a
// temporary name and renames it whole, so a directory that exists is complete.
func (b Binaries) complete() bool {
	for _, c := range Components {
		if _, err := os.Stat(b.Path(c)); err != nil {
			return false
		}
	}
	return true
}

// ldflags stamps the release into the binaries as the Kubernetes build does (without it they
// call themselves v0.0.0-master, and kubectl version and the node's kubeletVersion say so);
// -s -w because nobody debugs these binaries and they link faster without symbol tables.
func ldflags(version string) string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	const pkg = "k8s.io/component-base/version"
	return fmt.Sprintf("-s -w -X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=%[3]s -X %[1]s.gitMinor=%[4]s -X %[1]s.gitTreeState=clean -X %[1]s.buildDate=1970-01-01T00:00:00Z",
		pkg, version, major, minor)
}

// build compiles every component into dir.
func build(ctx context.Context, src, dir, version string) error {
	pkgs := []string{"./etcd"}
	for _, c := range kubeCommands {
		pkgs = append(pkgs, "k8s.io/kubernetes/cmd/"+c)
	}
	// One go build for all of them, so shared packages compile once. CGO off as in the
	// Kubernetes release builds.
	args := append([]string{"build", "-trimpath", "-ldflags=" + ldflags(version), "-o", dir + "/"}, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly -buildvcs=false")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build Kubernetes in %s: %w\n%s", src, err, harness.Tail([]byte(out.String()), 4096))
	}
	return nil
}
