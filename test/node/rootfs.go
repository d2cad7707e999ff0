package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crishim/crishim/test/harness"
)

// The systemd node's root file system: Debian 12 made offline from Debian's packages by
// debootstrap, as kind's node image is a Debian with systemd, and cached like the Kubernetes
// binaries. minbase plus what a kubeadm node has: systemd as init and its D-Bus, the tools
// the kubelet and the units call (ip, iptables, modprobe, ps), runc and the CNI plugins of
// Debian (the same packages the harness installs on the machine).
const rootfsSuite = "bookworm"

var rootfsPackages = []string{
	"systemd", "systemd-sysv", "dbus", "iproute2", "iptables", "kmod", "procps",
	"runc", "containernetworking-plugins",
}

// rootfsCache holds one directory per key; rootfsKey changes with the suite and packages.
var rootfsCache = filepath.Join(harness.BaseDir, "sysnode-rootfs")

func rootfsKey() string {
	h := sha256.New()
	fmt.Fprintln(h, rootfsSuite, strings.Join(rootfsPackages, ","), rootfsSetupVersion)
	return rootfsSuite + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// rootfsSetupVersion changes when setupRootfs does: the cached tree is then rebuilt.
const rootfsSetupVersion = 1

// EnsureRootfs returns the cached root file system, building it first (3–4 minutes with
// Debian's mirror) if this key was never built. It is built into a temporary directory and
// renamed, under a lock, so a killed build leaves no half tree behind a valid name.
func EnsureRootfs(ctx context.Context, log *slog.Logger) (string, error) {
	if log == nil {
		log = slog.Default()
	}
	dir := filepath.Join(rootfsCache, rootfsKey())
	if rootfsComplete(dir) {
		return dir, nil
	}
	if err := os.MkdirAll(rootfsCache, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(rootfsCache, "build.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	if rootfsComplete(dir) { // built by whoever held the lock before us
		return dir, nil
	}
	if err := harness.EnsureDebootstrap(ctx); err != nil {
		return "", err
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	log.Info("building the systemd node's root file system (debootstrap, 3-4 minutes; cached after)", "into", dir)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+strings.Join(rootfsPackages, ","), rootfsSuite, tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("debootstrap: %w\n%s", err, tailBytes(out, 4096))
	}
	if err := setupRootfs(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	log.Info("built the root file system", "took", time.Since(start).Round(time.Second))
	pruneOtherRootfs(dir)
	return dir, nil
}

func rootfsComplete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, rootfsDoneMarker))
	return err == nil
}

const rootfsDoneMarker = "etc/crishim-testbed-rootfs"

// setupRootfs makes the tree a node image, as kind's Dockerfile does for its base image:
// no console logins (there is no console), CNI plugins where containerd looks by default,
// and the mark of a finished build.
func setupRootfs(root string) error {
	for _, unit := range []string{"getty@tty1.service", "console-getty.service", "systemd-udevd.service", "systemd-modules-load.service"} {
		if err := os.Symlink("/dev/null", filepath.Join(root, "etc/systemd/system", unit)); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "opt/cni"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink("/usr/lib/cni", filepath.Join(root, "opt/cni/bin")); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return os.WriteFile(filepath.Join(root, rootfsDoneMarker), []byte(rootfsKey()+"\n"), 0o644)
}

// pruneOtherRootfs removes trees of other keys, which nothing uses any more.
func pruneOtherRootfs(keep string) {
	entries, _ := os.ReadDir(rootfsCache)
	for _, e := range entries {
		p := filepath.Join(rootfsCache, e.Name())
		if e.IsDir() && p != keep {
			_ = os.RemoveAll(p)
		}
	}
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
