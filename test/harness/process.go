package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// readyTimeout bounds how long containerd may take to serve CRI after being started.
const readyTimeout = 30 * time.Second

// daemon is one run of the containerd process started by this process.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // Wait's result, valid after done
}

func (d *daemon) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// startDaemon starts the slot's runtime daemon (containerd) as its backend says. Not
// detached, it dies with us (Pdeathsig), so an interrupted test never leaves a containerd
// behind; its shims and containers do survive and are swept by the next owner of the slot.
// Detached, it gets its own session and the slot lock, so the slot stays owned for as long
// as it lives.
func startDaemon(be *backend, l layout, opts Options, lock *os.File) (*daemon, error) {
	logFile, err := os.OpenFile(l.logFile(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open containerd log: %w", err)
	}

	// Not CommandContext: the daemon must outlive the context of the call that started it.
	argv, path := be.command(l)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = withPath(os.Environ(), path)
	if be.env != nil {
		cmd.Env = append(cmd.Env, be.env(l)...)
	}
	var copied chan struct{} // closed when the tee below has copied everything, if there is one
	if opts.Detach {
		defer logFile.Close() // the child has its own copy
		// A pipe to a writer in this process would break when we exit, so a detached
		// containerd can only write to a file.
		out := logFile
		if opts.Log != nil {
			f, ok := opts.Log.(*os.File)
			if !ok {
				return nil, errors.New("Options.Log must be nil or an *os.File when Detach is set")
			}
			out = f
		}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		cmd.ExtraFiles = []*os.File{lock}
	} else {
		out := logFile
		if opts.Log != nil {
			// Our own pipe and copier rather than exec's: exec's copier stops at the first
			// write error (leaving containerd to die of SIGPIPE) and makes Wait wait for it.
			r, w, err := os.Pipe()
			if err != nil {
				logFile.Close()
				return nil, fmt.Errorf("create containerd output pipe: %w", err)
			}
			defer w.Close() // the child has its own copy
			copied = make(chan struct{})
			go func() {
				defer close(copied)
				defer logFile.Close()
				defer r.Close()
				// Read to EOF whatever the writers do, so containerd never sees EPIPE.
				_, _ = io.Copy(teeWriter{logFile, opts.Log}, r)
			}()
			out = w
		} else {
			defer logFile.Close() // the child has its own copy
		}
		cmd.Stdout, cmd.Stderr = out, out
		// Own process group so a terminal ^C aimed at `go test` does not also hit containerd
		// mid-test. Pdeathsig still guarantees it cannot outlive us; it fires when the
		// forking OS thread exits, which the Go runtime only does for goroutines that exit
		// while locked to their thread, something the callers of this package must not do.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		if copied != nil {
			// Let the last words reach Options.Log before reporting the exit, but do not
			// hang if some descendant kept the pipe open.
			select {
			case <-copied:
			case <-time.After(time.Second):
			}
		}
		close(d.done)
	}()
	if err := os.WriteFile(l.pidFile(), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		<-d.done
		return nil, fmt.Errorf("write containerd pidfile: %w", err)
	}
	return d, nil
}

// teeWriter writes to the log file and, best effort, to Options.Log: a failing Options.Log
// must neither stop the log file nor make containerd's writes fail.
type teeWriter struct {
	file  io.Writer
	extra io.Writer
}

func (t teeWriter) Write(p []byte) (int, error) {
	_, _ = t.extra.Write(p)
	_, _ = t.file.Write(p)
	return len(p), nil
}

// waitReady waits until containerd serves CRI with runtime and network ready, failing fast
// if containerd exits. Errors carry the end of containerd's log, which is where the reason is.
func waitReady(ctx context.Context, l layout, d *daemon) error {
	conn, err := dialCRI(l.socket())
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	err = poll(ctx, readyTimeout, func(ctx context.Context) error {
		if d.exited() {
			return fmt.Errorf("containerd exited: %w", errors.Join(d.err, errExited))
		}
		err := criReady(ctx, rt)
		if err != nil && criFailed(l) {
			// containerd keeps running without the CRI plugin; waiting will not help.
			return fmt.Errorf("%w: %w", errCRIFailed, err)
		}
		return err
	}, errExited, errCRIFailed)
	if err != nil {
		return fmt.Errorf("wait for containerd at %s: %w\n--- tail of %s ---\n%s", l.socket(), err, l.logFile(), logTail(l))
	}
	return nil
}

var (
	errExited    = errors.New("process exited")
	errCRIFailed = errors.New("containerd failed to load its CRI plugin (see log)")
)

// criFailed reports whether containerd logged that its CRI plugin did not load.
func criFailed(l layout) bool {
	b, err := os.ReadFile(l.logFile())
	return err == nil && bytes.Contains(b, []byte(`failed to load plugin io.containerd.grpc.v1.cri"`))
}

// logTail returns the end of containerd's log for error messages.
func logTail(l layout) string {
	b, err := os.ReadFile(l.logFile())
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	return tail(b, 4096)
}

// withPath returns env with PATH set to path.
func withPath(env []string, path string) []string {
	env = slices.DeleteFunc(env, func(e string) bool { return strings.HasPrefix(e, "PATH=") })
	return append(env, "PATH="+path)
}

// procCmdline returns a process's argv, or nil if it is gone or a kernel thread.
func procCmdline(pid int) []string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// procStat returns a process's state letter and parent pid.
func procStat(pid int) (state byte, ppid int, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	// comm may contain spaces and parentheses; the fields after the last ')' are fixed.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0][0], ppid, err
}

// alive reports whether pid runs. A zombie counts as dead: it holds no resources we care
// about, and its reaping may be up to a parent (or an init) we do not control.
func alive(pid int) bool {
	state, _, err := procStat(pid)
	return err == nil && state != 'Z' && state != 'X'
}

// allPIDs lists every process on the machine.
func allPIDs() []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// daemonNames are the base names of the runtime daemons backends start, each with the
// slot's config path in its argv (containerd of either version is "containerd"; CRI-O is
// "crio").
var daemonNames = []string{"containerd", "crio"}

// isContainerdOf reports whether pid is a runtime daemon running on the slot's config. Used
// to trust a pidfile (the pid may have been reused) and to find a daemon without one. It
// needs no backend, so a slot is torn down whatever ran in it.
func isContainerdOf(pid int, l layout) bool {
	argv := procCmdline(pid)
	return len(argv) > 0 && slices.Contains(daemonNames, filepath.Base(argv[0])) && slices.Contains(argv, l.config())
}

// isClientOf reports whether pid is a runc v2 shim or a ctr talking to the slot's containerd.
// Shims name their containerd by its socket in "-address <socket>"; our ctr calls do the
// same with "--address". A ctr orphaned by a killed test would otherwise hang on forever.
func isClientOf(pid int, l layout) bool {
	argv := procCmdline(pid)
	if len(argv) == 0 {
		return false
	}
	switch filepath.Base(argv[0]) {
	case "containerd-shim-runc-v2", "ctr":
	default:
		return false
	}
	for i, a := range argv[:len(argv)-1] {
		if (a == "-address" || a == "--address") && argv[i+1] == l.socket() {
			return true
		}
	}
	return false
}

// isShimOf reports whether pid is a runc v2 shim serving the slot's containerd.
func isShimOf(pid int, l layout) bool {
	argv := procCmdline(pid)
	return len(argv) > 0 && filepath.Base(argv[0]) == "containerd-shim-runc-v2" && isClientOf(pid, l)
}

// signalAndWait sends sig to every pid and waits until all are dead or timeout passes; it
// returns the pids still alive.
func signalAndWait(pids []int, sig syscall.Signal, timeout time.Duration) []int {
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
	deadline := time.Now().Add(timeout)
	for {
		pids = slices.DeleteFunc(pids, func(pid int) bool { return !alive(pid) })
		if len(pids) == 0 || time.Now().After(deadline) {
			return pids
		}
		time.Sleep(20 * time.Millisecond)
	}
}
