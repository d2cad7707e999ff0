package node

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/crishim/crishim/test/harness"
)

// startDaemon starts bin in its own session with env added to this process's environment
// and output appended to the node's log for name. It outlives this process (`make node`
// leaves the node running); whoever tears the node down finds it by the node directory in
// its flags. While this process lives it reaps
// the daemon, so a stopped one leaves no zombie; the returned channel closes when it exits.
// (Right after it starts, its /proc cmdline may still be empty: the kernel closes the exec
// pipe Start waits on before it sets up the new argv. So its starter watches this channel
// rather than looking for it by its flags.)
func startDaemon(l layout, bin string, args []string, env ...string) (exited <-chan struct{}, err error) {
	name := filepath.Base(bin)
	if err := os.MkdirAll(l.path("logs"), 0o755); err != nil {
		return nil, fmt.Errorf("create log dir: %w", err)
	}
	log, err := os.OpenFile(l.logFile(name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	defer log.Close() // the child has its own copy
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = l.dir
	cmd.Env = append(append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return done, nil
}

// hasExited reports whether a daemon whose exit channel is done has exited.
func hasExited(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// errExited stops a wait for a component that is no longer running.
var errExited = errors.New("exited")

// daemonsOf returns the pids of the node's processes named name (all of them if name is "").
func daemonsOf(l layout, name string) []int {
	mentions := harness.ArgvMentions(l.dir)
	return harness.ProcessesWhere(func(argv []string) bool {
		return (name == "" || filepath.Base(argv[0]) == name) && mentions(argv)
	})
}

// stopDaemons terminates the node's processes named name (every one if name is "").
func stopDaemons(l layout, name string, grace time.Duration) error {
	if left := harness.Terminate(daemonsOf(l, name), grace); len(left) > 0 {
		return fmt.Errorf("node processes %v survived SIGKILL", left)
	}
	return nil
}

// running reports whether every named component has a live process.
func running(l layout, names ...string) bool {
	return !slices.ContainsFunc(names, func(n string) bool { return len(daemonsOf(l, n)) == 0 })
}

// logTail is the end of a component's log, for error messages.
func logTail(l layout, name string) string {
	b, _ := os.ReadFile(l.logFile(name))
	return harness.Tail(b, 3000)
}
