package harness

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// busyboxPath is the static busybox the images are built from; busybox-static installs it.
const busyboxPath = "/bin/busybox"

// requirement is one file the harness needs and the Debian package providing it.
type requirement struct {
	name    string // binary name looked up in PATH, or an absolute path
	pkg     string
	isValid func(path string) error // optional extra check on the found file
}

// containerdPackageRequirements are Debian's containerd package, which only
// RuntimeContainerd16 runs; containerd 2.x is built (containerdbin.go).
var containerdPackageRequirements = []requirement{
	{name: "containerd", pkg: "containerd"},
	{name: "containerd-shim-runc-v2", pkg: "containerd"},
	{name: "ctr", pkg: "containerd"},
}

// commonRequirements are what every runtime of the harness needs from Debian.
var commonRequirements = []requirement{
	{name: "runc", pkg: "runc"},
	{name: filepath.Join(cniBinDir, "bridge"), pkg: "containernetworking-plugins"},
	{name: filepath.Join(cniBinDir, "host-local"), pkg: "containernetworking-plugins"},
	{name: filepath.Join(cniBinDir, "loopback"), pkg: "containernetworking-plugins"},
	{name: busyboxPath, pkg: "busybox-static", isValid: checkStatic},
	{name: "ip", pkg: "iproute2"},
}

// commonPackages is what ensurePackages installs when anything is missing.
var commonPackages = []string{"runc", "containernetworking-plugins", "busybox-static"}

// installLock serialises ensurePackages across processes: `go test ./...` runs the test
// binaries of several packages at once, and two apt-gets would fail on dpkg's lock.
var installLock = filepath.Join(BaseDir, "install.lock")

// ensurePackages makes sure what runtime r needs from Debian is installed: runc, the CNI
// bridge, host-local and loopback plugins, a static /bin/busybox and ip (iproute2), and for
// RuntimeContainerd16 Debian's containerd (with its runc v2 shim and ctr). When something is
// missing and we are root it runs `apt-get update` once and then `apt-get install -y` of the
// packages (plus iproute2 if ip is missing); when not root it returns an error naming the
// missing pieces and the command to run.
func ensurePackages(ctx context.Context, r Runtime) error {
	reqs, base := commonRequirements, commonPackages
	if r == RuntimeContainerd16 {
		reqs = append(slices.Clone(containerdPackageRequirements), reqs...)
		base = append([]string{"containerd"}, base...)
	}
	return ensure(ctx, reqs, base)
}

// EnsurePrometheus makes sure the Prometheus server and promtool are installed (Debian's
// prometheus package), the same way ensurePackages does for a runtime.
func EnsurePrometheus(ctx context.Context) error {
	return ensure(ctx, []requirement{{name: "prometheus", pkg: "prometheus"}, {name: "promtool", pkg: "prometheus"}}, nil)
}

// EnsureLintian makes sure lintian is installed, the same way ensurePackages does for a
// runtime.
func EnsureLintian(ctx context.Context) error {
	return ensure(ctx, []requirement{{name: "lintian", pkg: "lintian"}}, nil)
}

// ensure installs what reqs lack: base (if anything is missing) plus the packages of the
// missing requirements.
func ensure(ctx context.Context, reqs []requirement, base []string) error {
	missing, pkgs := missingRequirements(reqs, base)
	if len(missing) == 0 {
		return nil
	}
	cmdline := "apt-get install -y --no-install-recommends " + strings.Join(pkgs, " ")
	if os.Geteuid() != 0 {
		return fmt.Errorf("missing %s; install them as root: apt-get update && %s", strings.Join(missing, ", "), cmdline)
	}
	unlock, err := lockFile(ctx, installLock)
	if err != nil {
		return err
	}
	defer unlock()
	// Another process may have installed everything while we waited.
	if missing, pkgs = missingRequirements(reqs, base); len(missing) == 0 {
		return nil
	}
	cmdline = "apt-get install -y --no-install-recommends " + strings.Join(pkgs, " ")
	for _, args := range [][]string{{"update"}, append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)} {
		// Wait for dpkg's lock rather than fail if something else holds it.
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"-o", "DPkg::Lock::Timeout=300"}, args...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s (needed for %s): %w\n%s", args[0], strings.Join(missing, ", "), err, tail(out, 2048))
		}
	}
	if missing, _ := missingRequirements(reqs, base); len(missing) > 0 {
		return fmt.Errorf("still missing after %s: %s", cmdline, strings.Join(missing, ", "))
	}
	return nil
}

// lockFile takes an exclusive flock on path, waiting for it as long as ctx allows.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// missingRequirements lists what is absent and the packages to install for it: base and
// the packages of the missing requirements.
func missingRequirements(reqs []requirement, base []string) (missing, pkgs []string) {
	need := map[string]bool{}
	for _, r := range reqs {
		path, err := lookPath(r.name)
		if err == nil && r.isValid != nil {
			err = r.isValid(path)
		}
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s (%v)", r.name, err))
			need[r.pkg] = true
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	pkgs = append(pkgs, base...)
	for _, r := range reqs {
		if need[r.pkg] && !slices.Contains(pkgs, r.pkg) {
			pkgs = append(pkgs, r.pkg)
		}
	}
	return missing, pkgs
}

// checkStatic rejects a dynamically linked busybox (Debian's "busybox" package): copied into
// an image without its libc it could not run.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("read ELF: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked, need busybox-static")
		}
	}
	return nil
}

// tail returns at most the last n bytes of b, for error messages.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// systemBinDirs are searched after PATH: root shells may run tests with a PATH lacking the
// sbin directories, where Debian puts runc and ip. containerd gets the same list (see
// callerPath) so that what EnsurePackages finds is what containerd runs.
var systemBinDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// lookPath finds an executable in PATH or, failing that, in systemBinDirs.
func lookPath(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err == nil || filepath.IsAbs(name) {
		return path, err
	}
	for _, d := range systemBinDirs {
		if p, perr := exec.LookPath(filepath.Join(d, name)); perr == nil {
			return p, nil
		}
	}
	return "", err
}

// binary returns the path to run name by, falling back to the bare name (and exec's own
// error) if it cannot be found.
func binary(name string) string {
	if p, err := lookPath(name); err == nil {
		return p
	}
	return name
}

// EnsureDebootstrap makes sure debootstrap is installed (Debian's package), the same way
// EnsurePackages does for containerd: test/node builds the systemd node's root file
// system with it.
func EnsureDebootstrap(ctx context.Context) error {
	return ensure(ctx, []requirement{{name: "debootstrap", pkg: "debootstrap"}}, nil)
}
