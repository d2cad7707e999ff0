package node

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// The systemd node runs in namespaces of its own, as a kind node runs in a container: PID,
// mount, UTS, IPC, network and cgroup. The host's /sys and cgroup file systems are never
// mounted into it: it gets a fresh sysfs (read-only, as Docker gives a container, so no
// udev-like writer reaches the host's devices), its own tmpfs at /sys/fs/cgroup, and the
// cgroup hierarchies mounted from inside its cgroup namespace, whose root is a cgroup the
// bed owns (sysnodeCgroup) in every hierarchy. Whatever its systemd remounts or creates
// there stays in that tmpfs or below that cgroup. Mounts are private from the first
// command on, so nothing propagates back to the host.

// cgroupHierarchy is one cgroup file system the host mounts under /sys/fs/cgroup.
type cgroupHierarchy struct {
	dir     string // under /sys/fs/cgroup ("" for a v2-only host)
	fstype  string // cgroup or cgroup2
	options string // the v1 controllers or name=, for mount -o
}

// hostCgroupHierarchies reads the host's hierarchies from its mount table.
func hostCgroupHierarchies() ([]cgroupHierarchy, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hs []cgroupHierarchy
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m, ok := parseMountinfo(sc.Text())
		if !ok || (m.fstype != "cgroup" && m.fstype != "cgroup2") {
			continue
		}
		rel, err := filepath.Rel(cgroupMount, m.target)
		if err != nil || strings.HasPrefix(rel, "..") || strings.Contains(rel, "/") {
			continue
		}
		if rel == "." {
			rel = ""
		}
		var opts []string
		if m.fstype == "cgroup" {
			for _, o := range strings.Split(m.superOptions, ",") {
				if o != "rw" && o != "ro" && !strings.HasPrefix(o, "release_agent") && o != "clone_children" && o != "xattr" && o != "nsdelegate" && o != "memory_recursiveprot" {
					opts = append(opts, o)
				}
			}
		}
		// A named hierarchy without controllers needs "none", or the kernel binds them all.
		if len(opts) > 0 && !slices.ContainsFunc(opts, func(o string) bool { return !strings.HasPrefix(o, "name=") }) {
			opts = append([]string{"none"}, opts...)
		}
		hs = append(hs, cgroupHierarchy{dir: rel, fstype: m.fstype, options: strings.Join(opts, ",")})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(hs) == 0 {
		return nil, errors.New("no cgroup file system under /sys/fs/cgroup")
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].dir < hs[j].dir })
	return hs, nil
}

// mountEntry is one line of /proc/self/mountinfo, the fields the bed reads.
type mountEntry struct {
	target, fstype, source, options, superOptions string
}

func parseMountinfo(line string) (mountEntry, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return mountEntry{}, false
	}
	a, b := strings.Fields(pre), strings.Fields(post)
	if len(a) < 6 || len(b) < 3 {
		return mountEntry{}, false
	}
	return mountEntry{target: unescapeMount(a[4]), options: a[5], fstype: b[0], source: b[1], superOptions: b[2]}, true
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// sysnodeCgroupDirs are the host directories of cgroup name in every hierarchy, the v2
// one of a hybrid host too (the node's systemd tracks its units there).
func sysnodeCgroupDirs(hs []cgroupHierarchy, name string) []string {
	var dirs []string
	for _, h := range hs {
		dirs = append(dirs, filepath.Join(cgroupMount, h.dir, name))
	}
	return dirs
}

// createSysnodeCgroup makes the node's cgroup in every hierarchy. A new v1 cpuset cgroup
// has no CPUs or memory nodes and takes no task until given its parent's, as kind's
// entrypoint does for the kubelet's cgroup.
func createSysnodeCgroup(hs []cgroupHierarchy, name string) error {
	for _, h := range hs {
		d := filepath.Join(cgroupMount, h.dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", d, err)
		}
		if h.fstype == "cgroup" && strings.Contains(","+h.options+",", ",cpuset,") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(cgroupMount, h.dir, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return nil
}

// cgroupEmpty reports whether no process is left in the node's cgroup trees.
func cgroupEmpty(hs []cgroupHierarchy, name string) bool {
	for _, root := range sysnodeCgroupDirs(hs, name) {
		busy := false
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			if len(strings.TrimSpace(string(b))) > 0 {
				busy = true
				return filepath.SkipAll
			}
			return nil
		})
		if busy {
			return false
		}
	}
	return true
}

// removeSysnodeCgroup removes the node's cgroup trees, deepest first.
func removeSysnodeCgroup(hs []cgroupHierarchy, name string) error {
	return removeCgroupDirs(sysnodeCgroupDirs(hs, name))
}

// stage1 runs as PID 1 of the new PID, mount, UTS, IPC and network namespaces, still in
// the host's cgroup namespace: it makes every mount private, waits for the starter to move
// it into the node's cgroup and wire its network (a line on stdin), then enters a new
// cgroup namespace rooted there and runs stage2 in the same process.
func stage1(stage2 string) string {
	return `set -eu
mount --make-rprivate /
read -r _
exec unshare --cgroup /bin/sh -c ` + shQuote(stage2) + ` </dev/null`
}

// stage2 mounts the node's file systems under root (lower is the cached Debian tree, the
// writable layer and the bind-mounted directories are the node directory's) and replaces
// itself with systemd as PID 1 in the new root.
func stage2(lower string, l layout, hs []cgroupHierarchy, binds [][2]string) string {
	var b strings.Builder
	r := l.path("root")
	q := shQuote
	fmt.Fprintf(&b, "set -eu\nR=%s\n", q(r))
	fmt.Fprintf(&b, "mount -t overlay overlay -o %s \"$R\"\n", q("lowerdir="+lower+",upperdir="+l.path("upper")+",workdir="+l.path("work")))
	for _, bd := range binds {
		fmt.Fprintf(&b, "mkdir -p \"$R\"%s\nmount --bind %s \"$R\"%s\n", q(bd[1]), q(bd[0]), q(bd[1]))
	}
	b.WriteString(`mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
# /proc/sys read-only (the kernel's tunables are the host's: no systemd-sysctl of the node
# applies Debian's defaults to them), its per-namespace net/ writable, and the six the kubelet
# insists on setting (it fails to start if it cannot), as any kubelet of the bed sets them.
mount --bind "$R/proc/sys" "$R/proc/sys"
mount --bind "$R/proc/sys/net" "$R/proc/sys/net"
for f in vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes; do
	mount --bind "$R/proc/sys/$f" "$R/proc/sys/$f"
done
mount -o remount,bind,ro,nosuid,nodev,noexec "$R/proc/sys"
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"
`)
	if len(hs) == 1 && hs[0].dir == "" {
		b.WriteString("mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 \"$R/sys/fs/cgroup\"\n")
	} else {
		b.WriteString("mount -t tmpfs -o nosuid,nodev,noexec,mode=755 cgroup \"$R/sys/fs/cgroup\"\n")
		for _, h := range hs {
			d := "\"$R/sys/fs/cgroup/\"" + q(h.dir)
			if h.fstype == "cgroup2" {
				fmt.Fprintf(&b, "mkdir %s\nmount -t cgroup2 -o nosuid,nodev,noexec cgroup2 %s\n", d, d)
			} else {
				fmt.Fprintf(&b, "mkdir %s\nmount -t cgroup -o nosuid,nodev,noexec,%s cgroup %s\n", d, q(h.options), d)
			}
		}
	}
	// /dev as a container runtime makes it: a tmpfs with the usual nodes, its own devpts.
	b.WriteString(`mount -t tmpfs -o nosuid,mode=755 dev "$R/dev"
mknod -m 666 "$R/dev/null" c 1 3
mknod -m 666 "$R/dev/zero" c 1 5
mknod -m 666 "$R/dev/full" c 1 7
mknod -m 666 "$R/dev/random" c 1 8
mknod -m 666 "$R/dev/urandom" c 1 9
mknod -m 666 "$R/dev/tty" c 5 0
mknod -m 644 "$R/dev/kmsg" c 1 11
mkdir "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"
cd "$R"
mkdir -p .oldroot
pivot_root . .oldroot
exec chroot . /bin/sh -c 'umount -l /.oldroot && rmdir /.oldroot && exec /sbin/init'
`)
	return b.String()
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// HostState is what a systemd node's run must leave as it found it: the mounts under /sys
// (file system, source, mount and super-block options: a remount shows) and the top level
// of every cgroup hierarchy. Other test-bed nodes' cgroups (crishim-*) come and go with
// parallel runs and are left out, except systemd node index's own, which must be gone.
func HostState(index int) (string, error) {
	var b strings.Builder
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(mi), "\n") {
		m, ok := parseMountinfo(line)
		if ok && (m.target == "/sys" || strings.HasPrefix(m.target, "/sys/")) {
			fmt.Fprintf(&b, "mount %s %s %s %s %s\n", m.target, m.fstype, m.source, m.options, m.superOptions)
		}
	}
	own := sysnodeCgroup(index)
	top, err := os.ReadDir(cgroupMount)
	if err != nil {
		return "", err
	}
	for _, h := range top {
		fmt.Fprintf(&b, "cgroup %s\n", h.Name())
		entries, _ := os.ReadDir(filepath.Join(cgroupMount, h.Name()))
		for _, e := range entries {
			if e.IsDir() && (e.Name() == own || !strings.HasPrefix(e.Name(), "crishim-")) {
				fmt.Fprintf(&b, "cgroup %s/%s\n", h.Name(), e.Name())
			}
		}
	}
	return b.String(), nil
}
