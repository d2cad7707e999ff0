package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// teardownTimeout bounds a whole teardown so a wedged containerd cannot hang a test run.
const teardownTimeout = 60 * time.Second

// cgroupRoot is where cgroup hierarchies (v1 controllers, or the v2 unified tree) are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// cniResultsDir is libcni's default cache. containerd 1.6 offers no way to move it, so its
// per-attachment files (named "<network>-<container>-<ifname>") are removed by network name.
const cniResultsDir = "/var/lib/cni/results"

// shimSocketDir is where containerd 1.6 puts shim sockets whatever its state dir.
const shimSocketDir = "/run/containerd/s"

// Teardown removes a slot left behind by another process, typically a detached demo
// (`make demo-clean`): it stops and removes every pod through CRI if containerd still
// answers, kills containerd, its shims and their containers, unmounts everything under dir,
// deletes the slot's bridge and CNI cache entries and removes dir. It refuses a dir that is
// not a harness slot. Running it on a slot in active use by a live test breaks that test.
func Teardown(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("teardown %s: %w", dir, err)
	}
	m, err := readSlotMeta(dir)
	if err != nil {
		return fmt.Errorf("teardown: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
	defer cancel()
	return teardown(ctx, dir, m)
}

// TeardownDetached tears down every slot whose containerd was started with Detach, whether
// it still runs or not, and returns the directories it removed. It leaves alone slots of
// ordinary (non-detached) harnesses, which may belong to tests running right now, and
// slots with an Owner, which their owner tears down.
func TeardownDetached() ([]string, error) {
	var removed []string
	var errs []error
	for n := 0; n < MaxSlots; n++ {
		dir := slotDir(n)
		b, err := os.ReadFile(layout{dir}.meta())
		var m slotMeta
		if err != nil || json.Unmarshal(b, &m) != nil || !m.Detached || m.Owner != "" {
			continue
		}
		// A free slot is a dead detached run: clean it while holding its lock. A busy one is
		// either the live detached containerd (which holds the lock) or a test that has just
		// taken over a dead detached slot and is sweeping it; only the former has our
		// containerd running and is ours to remove.
		lock, err := lockSlot(n)
		switch {
		case err == nil:
		case errors.Is(err, errSlotBusy) && len(findContainerd(layout{dir})) > 0:
		case errors.Is(err, errSlotBusy):
			continue
		default:
			errs = append(errs, err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
		err = teardown(ctx, dir, m)
		cancel()
		if lock != nil {
			lock.Close()
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, dir)
	}
	return removed, errors.Join(errs...)
}

// teardown does the work of Teardown; the steps are ordered so that each one leaves the next
// less to do: CRI first (clean CNI DEL and unmounts), then processes (so nothing holds
// mounts or the netns), then mounts (so removing files cannot descend into a mount), then
// the machine-global names, then the files. It keeps going after errors so one stuck piece
// does not leave the rest behind, and reports all of them.
func teardown(ctx context.Context, dir string, m slotMeta) error {
	l := layout{dir}
	var errs []error

	// A failed CRI removal is not an error by itself: the forced steps below clean up the
	// same things. It is reported only as context if they fail too.
	var criErr error
	containerdPIDs := findContainerd(l)
	if len(containerdPIDs) > 0 {
		criErr = removePodsIfAnswering(ctx, l)
		if left := signalAndWait(containerdPIDs, syscall.SIGTERM, 3*time.Second); len(left) > 0 {
			if left := signalAndWait(left, syscall.SIGKILL, 5*time.Second); len(left) > 0 {
				errs = append(errs, fmt.Errorf("containerd %v survived SIGKILL", left))
			}
		}
	}

	tasks := readTasks(l)
	if left := signalAndWait(slotProcesses(l, tasks), syscall.SIGKILL, 5*time.Second); len(left) > 0 {
		errs = append(errs, fmt.Errorf("processes %v survived SIGKILL", left))
	}
	// Whatever ran in the slot: a CRI-O slot whose slot.json was lost looks like containerd's.
	if err := teardownCRIO(l); err != nil {
		errs = append(errs, err)
	}
	for _, t := range tasks {
		if err := removeCgroup(t.cgroupsPath); err != nil {
			errs = append(errs, err)
		}
		if err := removeShimSocket(t.shimAddress); err != nil {
			errs = append(errs, err)
		}
	}

	if err := unmountUnder(dir); err != nil {
		errs = append(errs, err)
	}
	if err := deleteLink(ctx, m.Bridge); err != nil {
		errs = append(errs, err)
	}
	if err := removeCNIResults(m.Network, knownIDs(l, tasks)); err != nil {
		errs = append(errs, err)
	}

	// Never remove files while anything is mounted below: RemoveAll would follow into the
	// mount and delete whatever it exposes.
	if mps, err := mountsUnder(dir); err != nil || len(mps) > 0 {
		errs = append(errs, fmt.Errorf("not removing %s: still mounted below it: %v (%v)", dir, mps, err))
	} else if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
	}
	if len(errs) > 0 {
		if criErr != nil {
			errs = append(errs, fmt.Errorf("before that, removing pods through CRI failed: %w", criErr))
		}
		return fmt.Errorf("teardown %s (%s): %w", dir, m.runtime(), errors.Join(errs...))
	}
	return nil
}

// findContainerd returns the slot's containerd processes: the one in the pidfile if it is
// really ours, and any other running on the slot's config (e.g. if the pidfile was lost).
func findContainerd(l layout) []int {
	var pids []int
	if b, err := os.ReadFile(l.pidFile()); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && alive(pid) && isContainerdOf(pid, l) {
			pids = append(pids, pid)
		}
	}
	for _, pid := range allPIDs() {
		if !slices.Contains(pids, pid) && alive(pid) && isContainerdOf(pid, l) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// removePodsIfAnswering removes all pods through CRI, but only if containerd answers
// quickly: a wedged containerd is about to be killed anyway.
func removePodsIfAnswering(ctx context.Context, l layout) error {
	conn, err := dialCRI(l.socket())
	if err != nil {
		return err
	}
	defer conn.Close()
	pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := runtimeVersion(pingCtx, conn); err != nil {
		return nil
	}
	podsCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return removeAllPods(podsCtx, l.socket())
}

// task is what a runc v2 shim bundle tells about a container or sandbox of the slot.
type task struct {
	id          string
	cgroupsPath string // from the OCI spec, cgroupfs style ("/k8s.io/<id>")
	shimAddress string // "unix:///run/containerd/s/<hash>"
}

// readTasks reads every task bundle under the slot's state dir. Bundles outlive killed
// shims and containerd, so they are the record of what a crashed run left running.
func readTasks(l layout) []task {
	entries, err := os.ReadDir(l.taskDir())
	if err != nil {
		return nil
	}
	var tasks []task
	for _, e := range entries {
		bundle := filepath.Join(l.taskDir(), e.Name())
		t := task{id: e.Name()}
		if b, err := os.ReadFile(filepath.Join(bundle, "config.json")); err == nil {
			var spec struct {
				Linux struct {
					CgroupsPath string `json:"cgroupsPath"`
				} `json:"linux"`
			}
			if json.Unmarshal(b, &spec) == nil {
				t.cgroupsPath = spec.Linux.CgroupsPath
			}
		}
		if b, err := os.ReadFile(filepath.Join(bundle, "address")); err == nil {
			t.shimAddress = strings.TrimSpace(string(b))
		}
		tasks = append(tasks, t)
	}
	return tasks
}

// slotProcesses finds the slot's shims, our ctr clients and every process of its containers. Several kinds
// of evidence are combined because each can be missing after a crash: shims are found by
// their -address; container processes as descendants of those shims (unless a shim died and
// they were reparented), as members of the tasks' cgroups, and by a root filesystem from
// the slot.
func slotProcesses(l layout, tasks []task) []int {
	found := map[int]bool{}
	children := map[int][]int{}
	pids := allPIDs()
	self := os.Getpid()
	ownMountNS, _ := os.Readlink("/proc/self/ns/mnt")
	for _, pid := range pids {
		if _, ppid, err := procStat(pid); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
		if isClientOf(pid, l) {
			found[pid] = true
		}
		if rootInSlot(pid, l.dir, ownMountNS) {
			found[pid] = true
		}
	}
	var walk func(int)
	walk = func(pid int) {
		for _, c := range children[pid] {
			if !found[c] {
				found[c] = true
				walk(c)
			}
		}
	}
	for pid := range found {
		walk(pid)
	}
	for _, t := range tasks {
		for _, pid := range cgroupProcs(t.cgroupsPath) {
			found[pid] = true
		}
	}
	delete(found, self)
	out := make([]int, 0, len(found))
	for pid := range found {
		out = append(out, pid)
	}
	return out
}

// rootInSlot reports whether pid's root filesystem comes from dir. A chrooted process shows
// it in /proc/<pid>/root; a pivot_rooted container process shows "/" there, but its mount
// namespace's root mount is an overlay whose layers (or a bind mount whose source) lie in dir.
func rootInSlot(pid int, dir, ownMountNS string) bool {
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	if root, err := os.Readlink(filepath.Join(proc, "root")); err == nil && root != "/" {
		return within(root, dir)
	}
	if ns, err := os.Readlink(filepath.Join(proc, "ns", "mnt")); err != nil || ns == ownMountNS {
		return false
	}
	b, err := os.ReadFile(filepath.Join(proc, "mountinfo"))
	if err != nil {
		return false
	}
	// The last mount on "/" is the one on top, i.e. the process's root.
	var top []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && f[4] == "/" {
			top = f
		}
	}
	if top == nil {
		return false
	}
	if within(unescapeMountinfo(top[3]), dir) {
		return true
	}
	// Super options follow the "-" separator: fstype, source, options.
	if i := slices.Index(top, "-"); i >= 0 && i+3 < len(top) {
		return strings.Contains(unescapeMountinfo(top[i+3]), "="+dir+"/")
	}
	return false
}

// cgroupDirs returns the directories of a cgroupfs-style cgroup path in every mounted
// hierarchy. Paths in systemd's "slice:prefix:name" form are not ours and are skipped.
func cgroupDirs(cgroupsPath string) []string {
	if cgroupsPath == "" || !strings.HasPrefix(cgroupsPath, "/") || strings.Contains(cgroupsPath, "..") {
		return nil
	}
	hierarchies, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil
	}
	var dirs []string
	// The v2 unified tree may be mounted at the root itself.
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.procs")); err == nil {
		dirs = append(dirs, filepath.Join(cgroupRoot, cgroupsPath))
	}
	for _, h := range hierarchies {
		if h.IsDir() {
			dirs = append(dirs, filepath.Join(cgroupRoot, h.Name(), cgroupsPath))
		}
	}
	return dirs
}

func cgroupProcs(cgroupsPath string) []int {
	var pids []int
	for _, d := range cgroupDirs(cgroupsPath) {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// removeCgroup removes a dead task's cgroup in every hierarchy; runc would have done it on
// delete, but a crashed run never got there.
func removeCgroup(cgroupsPath string) error {
	var errs []error
	for _, d := range cgroupDirs(cgroupsPath) {
		// A freshly killed process may still be leaving the cgroup, hence the retries.
		var err error
		for range 50 {
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// removeShimSocket removes a dead shim's socket from the shared shim socket directory, and
// only from there: the address comes from a file we did not necessarily write.
func removeShimSocket(address string) error {
	path, ok := strings.CutPrefix(address, "unix://")
	if !ok || filepath.Dir(path) != shimSocketDir {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove shim socket: %w", err)
	}
	return nil
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// mountsUnder lists mount points at or below dir, deepest first so they can be unmounted in
// order.
func mountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	var mps []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if mp := unescapeMountinfo(f[4]); within(mp, dir) {
			mps = append(mps, mp)
		}
	}
	// Later mounts may stack on earlier ones at the same point: unmount in reverse order,
	// then deepest first.
	slices.Reverse(mps)
	slices.SortStableFunc(mps, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return mps, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for space etc.) of mountinfo fields.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountUnder lazily unmounts everything at or below dir. MNT_DETACH is enough: the
// processes that could use these mounts are dead, and it cannot fail on a busy mount.
func unmountUnder(dir string) error {
	var last error
	for range 5 {
		mps, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				last = fmt.Errorf("unmount %s: %w", mp, err)
			}
		}
	}
	if last == nil {
		last = errors.New("mounts keep reappearing")
	}
	return fmt.Errorf("unmount under %s: %w", dir, last)
}

// deleteLink deletes a network interface if it exists.
func deleteLink(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	if _, err := os.Lstat(filepath.Join("/sys/class/net", name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if out, err := exec.CommandContext(ctx, binary("ip"), "link", "del", "dev", name).CombinedOutput(); err != nil {
		if _, serr := os.Lstat(filepath.Join("/sys/class/net", name)); errors.Is(serr, os.ErrNotExist) {
			return nil // raced with the kernel removing it
		}
		return fmt.Errorf("ip link del %s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// removeCNIResults removes libcni's cached results for the slot: those of the slot's network
// (named after it) and those of go-cni's built-in "cni-loopback" network for the slot's
// sandboxes (named after the sandbox id, random and so unique to the slot).
func removeCNIResults(network string, ids []string) error {
	var patterns []string
	if network != "" {
		patterns = append(patterns, network+"-*")
	}
	for _, id := range ids {
		// Ids come from directory names; never let one widen the glob.
		if id != "" && !strings.ContainsAny(id, "*?[\\/") {
			patterns = append(patterns, "*-"+id+"-*")
		}
	}
	var errs []error
	for _, p := range patterns {
		matches, err := filepath.Glob(filepath.Join(cniResultsDir, p))
		if err != nil {
			return fmt.Errorf("list CNI results: %w", err)
		}
		for _, f := range matches {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove CNI result: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// knownIDs lists the ids of every task and CRI sandbox recorded under the slot.
func knownIDs(l layout, tasks []task) []string {
	var ids []string
	for _, t := range tasks {
		ids = append(ids, t.id)
	}
	for _, d := range []string{l.root(), l.state()} {
		entries, _ := os.ReadDir(filepath.Join(d, "io.containerd.grpc.v1.cri", "sandboxes"))
		for _, e := range entries {
			if !slices.Contains(ids, e.Name()) {
				ids = append(ids, e.Name())
			}
		}
	}
	return ids
}
