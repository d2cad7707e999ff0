package systemdunit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Process is a service started in its sandbox.
type Process struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Done is closed once the process has exited; Err then says how.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is cmd.Wait's error, once Done is closed.
func (p *Process) Err() error { return p.err }

// Start starts cmd (the service's ExecStart; cmd.Env the manager's environment and the
// unit's, os.Environ() if nil) in a mount namespace of its own built as Mounts plans it,
// after making the unit's directories under p.State with their modes, as systemd makes
// them, and adding their variables to cmd.Env. It needs root. The machine's own file
// system is never changed: a path the sandbox needs that does not exist on the host (the
// binary at /usr/local/bin, /var/log/crishim) is made in an overlay of its parent whose
// upper layer is under p.State.
//
// The namespace is made by one thread of this process, which starts cmd and waits for it,
// and is never given back to the Go scheduler, nor ended: it parks for the life of the
// process (parkForever). Never the main thread: /proc/self shows the whole process the main
// thread's mounts.
func (sb Sandbox) Start(cmd *exec.Cmd, p Placement) (*Process, error) {
	sb, err := sb.resolved()
	if err != nil {
		return nil, err
	}
	for _, d := range sb.Directories {
		host := filepath.Join(p.State, d.Path)
		if err := os.MkdirAll(host, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chmod(host, d.Mode); err != nil {
			return nil, err
		}
	}
	ms, err := sb.Mounts(p)
	if err != nil {
		return nil, err
	}
	scratch := filepath.Join(p.State, ".overlays")
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return nil, err
	}
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, sb.Env()...)
	proc := &Process{Cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	onThread(func() {
		b := &builder{scratch: scratch}
		if err := b.build(ms); err != nil {
			b.closeTrees()
			close(proc.done)
			started <- fmt.Errorf("sandbox: %w", err)
			parkForever()
		}
		if err := cmd.Start(); err != nil {
			b.closeTrees()
			close(proc.done)
			started <- err
			parkForever()
		}
		b.closeTrees()
		started <- nil
		proc.err = cmd.Wait()
		close(proc.done)
		parkForever()
	})
	if err := <-started; err != nil {
		return nil, err
	}
	return proc, nil
}

// parkForever keeps the calling goroutine, and the thread locked to it, for the life of
// the process. A Go thread that ends (a locked goroutine returning) fires the parent-death
// signal (Pdeathsig) of every child any goroutine ever forked from that thread, and the
// scheduler may have run the test bed's own forks there: its containerd was SIGKILLed when
// this thread ended, failing every later test of the run. A thread left in the sandbox's
// mount namespace must not serve other goroutines either, so it parks. One per Start, in
// test binaries only.
func parkForever() {
	select {}
}

// onThread runs f in a goroutine locked to a thread other than the main one; f never
// returns (parkForever).
func onThread(f func()) {
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if unix.Gettid() != unix.Getpid() {
			f()
			return
		}
		// The main thread. Held here until another goroutine is locked to a thread, so the
		// scheduler cannot give it this one; then given back.
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			f()
		}()
		<-locked
		runtime.UnlockOSThread()
	}()
}

// builder applies a plan of mounts in the calling thread's new mount namespace.
type builder struct {
	scratch  string      // host directory for overlays' upper layers
	trees    map[int]int // plan index -> detached copy of the bind's source
	writable []string    // file systems made here, where new mount points may be made
	overlays int
}

func (b *builder) build(ms []Mount) error {
	// CLONE_NEWNS unshares the thread's file-system attributes with it (CLONE_FS).
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	// Every source is taken before anything can hide it (PrivateTmp= hides the /tmp a
	// test keeps its files in).
	b.trees = map[int]int{}
	for i, m := range ms {
		if m.Op != Bind && m.Op != BindWritable {
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.Source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("open_tree %s: %w", m.Source, err)
		}
		b.trees[i] = fd
	}
	for i, m := range ms {
		if err := b.apply(i, m); err != nil {
			return fmt.Errorf("%s %s: %w", opName[m.Op], m.Target, err)
		}
	}
	return nil
}

var opName = map[MountOp]string{Bind: "bind", BindWritable: "bind writable", Tmpfs: "tmpfs", TmpfsReadOnly: "read-only tmpfs", ReadOnly: "read-only", Writable: "writable"}

func (b *builder) apply(i int, m Mount) error {
	switch m.Op {
	case Bind, BindWritable:
		// The source's kind from the copy: the source may be hidden by now.
		var st unix.Stat_t
		if err := unix.Fstat(b.trees[i], &st); err != nil {
			return err
		}
		if err := b.mountpoint(m.Target, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
			return err
		}
		if err := unix.MoveMount(b.trees[i], "", unix.AT_FDCWD, m.Target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("move_mount: %w", err)
		}
		if m.Op == Bind {
			return setattr(m.Target, unix.MOUNT_ATTR_RDONLY, 0)
		}
		if m.Source != m.Target { // not the host's own directory (ReadWritePaths=)
			b.writable = append(b.writable, m.Target)
		}
		return setattr(m.Target, 0, unix.MOUNT_ATTR_RDONLY)
	case Tmpfs, TmpfsReadOnly:
		if err := b.mountpoint(m.Target, true); err != nil {
			return err
		}
		if err := unix.Mount("tmpfs", m.Target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=%o", m.Mode)); err != nil {
			return err
		}
		if m.Op == TmpfsReadOnly {
			return setattr(m.Target, unix.MOUNT_ATTR_RDONLY, 0)
		}
		b.writable = append(b.writable, m.Target)
		return nil
	case ReadOnly, Writable:
		if m.Target != "/" && !isMountRoot(m.Target) {
			// mount_setattr changes the whole mount a path is on: give the path a
			// mount of its own first, as systemd does.
			fd, err := unix.OpenTree(unix.AT_FDCWD, m.Target, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
			if err != nil {
				return fmt.Errorf("open_tree: %w", err)
			}
			err = unix.MoveMount(fd, "", unix.AT_FDCWD, m.Target, unix.MOVE_MOUNT_F_EMPTY_PATH)
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("move_mount: %w", err)
			}
		}
		if m.Op == ReadOnly {
			return setattr(m.Target, unix.MOUNT_ATTR_RDONLY, 0)
		}
		return setattr(m.Target, 0, unix.MOUNT_ATTR_RDONLY)
	}
	return fmt.Errorf("unknown mount operation %d", m.Op)
}

// setattr sets and clears mount attributes on the tree at path.
func setattr(path string, set, clear uint64) error {
	if err := unix.MountSetattr(unix.AT_FDCWD, path, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: set, Attr_clr: clear}); err != nil {
		return fmt.Errorf("mount_setattr: %w", err)
	}
	return nil
}

func isMountRoot(path string) bool {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &st)
	return err == nil && st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 && st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
}

// mountpoint makes path exist (a directory or an empty file) to mount on, never on the
// machine's own file system: inside a file system made here, or else in an overlay of its
// nearest existing ancestor.
func (b *builder) mountpoint(path string, dir bool) error {
	if _, err := os.Lstat(path); err == nil {
		return nil
	}
	if !b.insideWritable(path) {
		base := filepath.Dir(path)
		for {
			if _, err := os.Lstat(base); err == nil {
				break
			}
			base = filepath.Dir(base)
		}
		if base == "/" {
			return fmt.Errorf("would overlay /")
		}
		b.overlays++
		upper := filepath.Join(b.scratch, fmt.Sprint(b.overlays))
		for _, d := range []string{upper + "/upper", upper + "/work"} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work", base, upper, upper)
		if err := unix.Mount("overlay", base, "overlay", 0, opts); err != nil {
			return fmt.Errorf("overlay %s: %w", base, err)
		}
		b.writable = append(b.writable, base)
	}
	if dir {
		return os.MkdirAll(path, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, nil, 0o644)
}

func (b *builder) insideWritable(path string) bool {
	for _, w := range b.writable {
		if path == w || strings.HasPrefix(path, w+"/") {
			return true
		}
	}
	return false
}

func (b *builder) closeTrees() {
	for i, fd := range b.trees {
		unix.Close(fd)
		delete(b.trees, i)
	}
}
