package packaging

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crishim/crishim/test/harness"
)

// TestDeb builds the Debian package with `make deb`, builds it again from a copy of the
// tree elsewhere and compares the bytes, lints it, and installs, upgrades, removes and
// purges it with dpkg in a root directory of its own (maintainer scripts included, run
// with DPKG_ROOT as dpkg does for --force-script-chrootless), so the machine's own root
// and dpkg database are never touched.
func TestDeb(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and installs the Debian package")
	}
	if os.Geteuid() != 0 {
		t.Skip("dpkg needs root to install files as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// Concurrent runs would install nfpm into bin/tools at once.
	unlock, err := harness.LockFile(ctx, filepath.Join(harness.BaseDir, "packaging.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if err := harness.EnsureLintian(ctx); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()

	version := run(ctx, t, root, "packaging/deb/version.sh")
	deb := makeDeb(ctx, t, root, filepath.Join(tmp, "first"), nil)
	arch := run(ctx, t, "", "dpkg", "--print-architecture")
	if got, want := filepath.Base(deb), "crishim_"+version+"_"+arch+".deb"; got != want {
		t.Errorf("make deb wrote %s, want %s (version from git)", got, want)
	}
	if got := run(ctx, t, "", "dpkg-deb", "--field", deb, "Version"); got != version {
		t.Errorf("package version %q, want %q", got, version)
	}

	t.Run("reproducible", func(t *testing.T) {
		src := copyTree(ctx, t, root, filepath.Join(tmp, "src"))
		again := makeDeb(ctx, t, src, filepath.Join(tmp, "again"), []string{
			"DEB_VERSION=" + version,
			"COMMIT=" + run(ctx, t, root, "git", "rev-parse", "--short", "HEAD"),
			"SOURCE_DATE_EPOCH=" + run(ctx, t, root, "git", "log", "-1", "--format=%ct"),
			"TOOLS=" + filepath.Join(root, "bin", "tools"),
		})
		a, err := os.ReadFile(deb)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s and %s (the same commit built in %s and %s) differ", deb, again, root, src)
		}
	})

	t.Run("lintian", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, "lintian", "--pedantic", "--fail-on", "error,warning,pedantic", deb)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("lintian: %v\n%s", err, out)
		}
	})

	t.Run("install upgrade remove purge", func(t *testing.T) {
		upgradeVersion := version + "+1"
		upgrade := makeDeb(ctx, t, root, filepath.Join(tmp, "upgrade"), []string{"DEB_VERSION=" + upgradeVersion})
		if err := exec.Command("dpkg", "--compare-versions", upgradeVersion, "gt", version).Run(); err != nil {
			t.Fatalf("dpkg does not order %s after %s", upgradeVersion, version)
		}
		lifecycle(ctx, t, filepath.Join(tmp, "root"), deb, version, upgrade, upgradeVersion)
	})
}

// realRootPaths are what installing crishim for real would create; the isolated installs
// must leave each as it was.
var realRootPaths = []string{
	"/usr/bin/crishim",
	"/etc/crishim",
	"/lib/systemd/system/crishim.service",
	"/lib/systemd/system/crishim.socket",
	"/etc/systemd/system/multi-user.target.wants/crishim.service",
	"/etc/systemd/system/sockets.target.wants/crishim.socket",
	"/var/lib/systemd/deb-systemd-helper-enabled/crishim.service.dsh-also",
}

// enableLink is what postinst's deb-systemd-helper enable creates (and purge removes);
// socketLink, what crishim.service's Also= makes it create for crishim.socket.
const (
	enableLink = "etc/systemd/system/multi-user.target.wants/crishim.service"
	socketLink = "etc/systemd/system/sockets.target.wants/crishim.socket"
)

func lifecycle(ctx context.Context, t *testing.T, r, deb, version, upgrade, upgradeVersion string) {
	before := exist(realRootPaths)
	defer func() {
		if after := exist(realRootPaths); !slices.Equal(before, after) {
			t.Errorf("the machine's root changed: %v before, %v after (paths %v)", before, after, realRootPaths)
		}
	}()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		if err := os.MkdirAll(filepath.Join(r, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(r, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	dpkg := func(args ...string) {
		t.Helper()
		run(ctx, t, "", "dpkg", append([]string{"--root=" + r, "--force-script-chrootless"}, args...)...)
	}
	status := func() string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "dpkg-query", "--admindir="+filepath.Join(r, "var/lib/dpkg"), "-W", "-f=${db:Status-Abbrev}${Version}", "crishim")
		out, _ := cmd.Output() // exits 1 for an unknown package
		return strings.TrimSpace(string(out))
	}
	systemdHelper := hasCommand("deb-systemd-helper")
	config := filepath.Join(r, "etc/crishim/config.toml")

	dpkg("--install", deb)
	if got := status(); got != "ii "+version {
		t.Fatalf("after install: status %q, want %q", got, "ii "+version)
	}
	for _, line := range strings.Split(run(ctx, t, "", "dpkg-deb", "--contents", deb), "\n") {
		f := strings.Fields(line)
		if p := filepath.Join(r, f[len(f)-1]); !isPresent(p) {
			t.Errorf("after install: %s missing", p)
		}
	}
	for _, p := range []string{
		"usr/bin/crishim", "usr/bin/crishimctl", "lib/systemd/system/crishim.service", "lib/systemd/system/crishim.socket",
		"etc/crishim/config.toml",
		"usr/share/crishim/kubernetes/rbac.yaml", "usr/share/crishim/kubernetes/notification-controller.yaml", "usr/share/crishim/prometheus/crishim-alerts.yaml",
		"usr/share/crishim/prometheus/crishim-alerts_test.yaml",
		"usr/share/doc/crishim/copyright", "usr/share/doc/crishim/THIRD_PARTY_NOTICES.gz", "usr/share/doc/crishim/changelog.gz",
		"usr/share/doc/crishim/install.md", "usr/share/doc/crishim/README.md", "usr/share/doc/crishim/CHANGELOG.md",
		"usr/share/bash-completion/completions/crishimctl", "usr/share/zsh/vendor-completions/_crishimctl",
		"usr/share/fish/vendor_completions.d/crishimctl.fish", "usr/share/bash-completion/completions/crishim",
	} {
		if !isPresent(filepath.Join(r, p)) {
			t.Errorf("after install: /%s missing", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(r, "usr/share/doc/crishim/copyright")); err != nil || !bytes.Contains(b, []byte("\nLicense: Apache-2.0\n")) {
		t.Errorf("/usr/share/doc/crishim/copyright does not license crishim Apache-2.0 (%v):\n%s", err, b)
	}
	// Settings come from the conffile: a flag on ExecStart would override its key.
	unit, err := os.ReadFile(filepath.Join(r, "lib/systemd/system/crishim.service"))
	if err != nil || !regexp.MustCompile(`(?m)^ExecStart=/usr/bin/crishim$`).Match(unit) {
		t.Errorf("crishim.service does not start /usr/bin/crishim without flags (%v):\n%s", err, unit)
	}
	// systemd runs every ExecReload= line: two would send two SIGHUPs per reload.
	if n := len(regexp.MustCompile(`(?m)^ExecReload=`).FindAll(unit, -1)); n != 1 {
		t.Errorf("crishim.service has %d ExecReload= lines, want 1:\n%s", n, unit)
	}
	// Socket activation: crishim.service needs crishim.socket, which holds the path
	// crishim serves by default (crishim refuses a passed socket elsewhere).
	socket, err := os.ReadFile(filepath.Join(r, "lib/systemd/system/crishim.socket"))
	if err != nil || !regexp.MustCompile(`(?m)^ListenStream=/run/crishim/crishim\.sock$`).Match(socket) ||
		!regexp.MustCompile(`(?m)^SocketMode=0660$`).Match(socket) || regexp.MustCompile(`(?m)^PartOf=`).Match(socket) {
		t.Errorf("crishim.socket does not listen at /run/crishim/crishim.sock with mode 0660, or restarts with crishim (PartOf=) (%v):\n%s", err, socket)
	}
	if !regexp.MustCompile(`(?m)^Requires=crishim\.socket$`).Match(unit) || !regexp.MustCompile(`(?m)^Also=crishim\.socket$`).Match(unit) ||
		!regexp.MustCompile(`(?m)^RuntimeDirectoryPreserve=yes$`).Match(unit) {
		t.Errorf("crishim.service lacks Requires=crishim.socket, Also=crishim.socket or RuntimeDirectoryPreserve=yes (which keeps the socket's directory at a restart):\n%s", unit)
	}
	if got := run(ctx, t, "", filepath.Join(r, "usr/bin/crishim"), "--config", "", "config", "dump"); !strings.Contains(got, `listen = "/run/crishim/crishim.sock"`) {
		t.Errorf("crishim's default listen is not crishim.socket's path:\n%s", got)
	}
	// The alerting rules' tests run where the package put them, beside the rules.
	if err := harness.EnsurePrometheus(ctx); err != nil {
		t.Fatal(err)
	}
	promtool := exec.CommandContext(ctx, "promtool", "test", "rules", "crishim-alerts_test.yaml")
	promtool.Dir = filepath.Join(r, "usr/share/crishim/prometheus")
	if out, err := promtool.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules in /usr/share/crishim/prometheus: %v\n%s", err, out)
	}
	if dropIns, err := os.ReadDir(filepath.Join(r, "usr/share/crishim/kubelet")); err != nil || len(dropIns) == 0 {
		t.Errorf("no kubelet drop-in shipped in /usr/share/crishim/kubelet (%v)", err)
	}
	for _, p := range []string{"etc/systemd/system/kubelet.service.d", "etc/kubernetes"} {
		if isPresent(filepath.Join(r, p)) {
			t.Errorf("the package installed /%s: it must ship the kubelet's drop-ins, not enable them", p)
		}
	}
	// The conffile is the binary's default configuration, valid input for --config.
	crishim := filepath.Join(r, "usr/bin/crishim")
	if b, err := os.ReadFile(config); err != nil || strings.TrimRight(string(b), "\n") != run(ctx, t, "", crishim, "config", "default") {
		t.Errorf("%s is not `crishim config default` (%v):\n%s", config, err, b)
	}
	run(ctx, t, "", crishim, "--config", config, "config", "dump")
	conffiles := run(ctx, t, "", "dpkg-query", "--admindir="+filepath.Join(r, "var/lib/dpkg"), "-W", "-f=${Conffiles}", "crishim")
	if !strings.Contains(conffiles, "/etc/crishim/config.toml ") {
		t.Errorf("conffiles %q lack /etc/crishim/config.toml", conffiles)
	}
	if got := run(ctx, t, "", filepath.Join(r, "usr/bin/crishim"), "--version"); got != "crishim "+version {
		t.Errorf("crishim --version: %q, want %q", got, "crishim "+version)
	}
	if got := run(ctx, t, "", filepath.Join(r, "usr/bin/crishimctl"), "version", "--client"); !strings.Contains(got, version) {
		t.Errorf("crishimctl version --client: %q, want %s in it", got, version)
	}
	if systemdHelper {
		for _, link := range []string{enableLink, socketLink} {
			if !isPresent(filepath.Join(r, link)) {
				t.Errorf("postinst did not enable crishim.service and crishim.socket (/%s missing)", link)
			}
		}
	} else {
		t.Log("deb-systemd-helper missing (init-system-helpers): enabling not checked")
	}

	// An operator's edit of the conffile survives an upgrade.
	edit := []byte("\n# edited by the operator\n")
	f, err := os.OpenFile(config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(edit); err != nil {
		t.Fatal(err)
	}
	f.Close()
	dpkg("--install", upgrade)
	if got := status(); got != "ii "+upgradeVersion {
		t.Fatalf("after upgrade: status %q, want %q", got, "ii "+upgradeVersion)
	}
	if got := run(ctx, t, "", filepath.Join(r, "usr/bin/crishim"), "--version"); got != "crishim "+upgradeVersion {
		t.Errorf("after upgrade: crishim --version %q, want %q", got, "crishim "+upgradeVersion)
	}
	assertEdited := func(when string) {
		t.Helper()
		b, err := os.ReadFile(config)
		if err != nil || !bytes.HasSuffix(b, edit) {
			t.Errorf("%s: %s lost the operator's edit (%v):\n%s", when, config, err, b)
		}
	}
	assertEdited("after upgrade")
	for _, leftover := range []string{".dpkg-new", ".dpkg-dist", ".dpkg-old"} {
		if isPresent(config + leftover) {
			t.Errorf("after upgrade: %s%s exists", config, leftover)
		}
	}

	// Remove keeps the conffile, purge removes it and what postinst created.
	dpkg("--remove", "crishim")
	if got := status(); got != "rc "+upgradeVersion {
		t.Errorf("after remove: status %q, want %q", got, "rc "+upgradeVersion)
	}
	if isPresent(filepath.Join(r, "usr/bin/crishim")) {
		t.Error("after remove: /usr/bin/crishim still there")
	}
	assertEdited("after remove")
	dpkg("--purge", "crishim")
	if got := status(); got != "" {
		t.Errorf("after purge: status %q, want the package unknown", got)
	}
	for _, p := range []string{"etc/crishim", enableLink, socketLink, "var/lib/systemd/deb-systemd-helper-enabled/crishim.service.dsh-also", "var/lib/systemd/deb-systemd-helper-enabled/" + enableLink[len("etc/systemd/system/"):]} {
		if isPresent(filepath.Join(r, p)) {
			t.Errorf("after purge: /%s still there", p)
		}
	}
}

// makeDeb runs `make deb` in dir with DIST=dist and the given make variables, and returns
// the package it wrote (the last line of its output).
func makeDeb(ctx context.Context, t *testing.T, dir, dist string, vars []string) string {
	t.Helper()
	args := append([]string{"-s", "deb", "DIST=" + dist}, vars...)
	out := run(ctx, t, dir, "make", args...)
	lines := strings.Split(out, "\n")
	deb := lines[len(lines)-1]
	if filepath.Dir(deb) != dist || !strings.HasSuffix(deb, ".deb") {
		t.Fatalf("make deb in %s: last line %q is not a package in %s:\n%s", dir, deb, dist, out)
	}
	return deb
}

// copyTree copies the files git knows in root (committed or not, ignored ones left out)
// to dst, keeping their modes: the tree as it is, somewhere else and without .git.
func copyTree(ctx context.Context, t *testing.T, root, dst string) string {
	t.Helper()
	list := run(ctx, t, root, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	for _, name := range strings.Split(strings.Trim(list, "\x00"), "\x00") {
		src := filepath.Join(root, name)
		info, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree
		}
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			t.Fatal(err)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			link, err := os.Readlink(src)
			if err == nil {
				err = os.Symlink(link, target)
			}
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target, b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// run runs name in dir (the test's if empty) with sbin directories on PATH (dpkg wants
// ldconfig and start-stop-daemon there), failing the test on error; it returns stdout
// without the trailing newline.
func run(ctx context.Context, t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH")+":/usr/local/sbin:/usr/sbin:/sbin", "DEBIAN_FRONTEND=noninteractive")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, harness.Tail(stderr.Bytes(), 4096))
	}
	return strings.TrimRight(string(out), "\n")
}

// hasCommand says whether name is in PATH or a system bin directory.
func hasCommand(name string) bool {
	for _, d := range []string{"", "/usr/sbin/", "/usr/bin/", "/sbin/", "/bin/"} {
		if _, err := exec.LookPath(d + name); err == nil {
			return true
		}
	}
	return false
}

func isPresent(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func exist(paths []string) []bool {
	out := make([]bool, len(paths))
	for i, p := range paths {
		out[i] = isPresent(p)
	}
	return out
}
