package harness

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The node test bed (test/node) runs more daemons than containerd and tears them down the same
// way; these expose the harness's process handling so it is written once.

// ProcessesWhere returns the pids of every process whose argv satisfies match.
func ProcessesWhere(match func(argv []string) bool) []int {
	var pids []int
	for _, pid := range allPIDs() {
		if argv := procCmdline(pid); len(argv) > 0 && match(argv) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ArgvMentions is a ProcessesWhere matcher for processes with dir, or a path below it, in an
// argument: every daemon of a test bed names a file of the bed's directory in its flags.
func ArgvMentions(dir string) func([]string) bool {
	dir = strings.TrimSuffix(dir, "/")
	return func(argv []string) bool {
		return slices.ContainsFunc(argv, func(a string) bool {
			return strings.Contains(a, dir+"/") || a == dir || strings.HasSuffix(a, "="+dir)
		})
	}
}

// Terminate sends SIGTERM, waits up to grace, then SIGKILLs what is left and waits again; it
// returns the pids that survived even that.
func Terminate(pids []int, grace time.Duration) []int {
	left := signalAndWait(pids, syscall.SIGTERM, grace)
	if len(left) == 0 {
		return nil
	}
	return signalAndWait(left, syscall.SIGKILL, 5*time.Second)
}

// Kill SIGKILLs pids, as a crash would end them, and waits for them; it returns the pids
// that survived.
func Kill(pids []int) []int { return signalAndWait(pids, syscall.SIGKILL, 5*time.Second) }

// LockFile takes an exclusive flock on path (created if needed), waiting for ctx; unlock
// releases it.
func LockFile(ctx context.Context, path string) (unlock func(), err error) {
	return lockFile(ctx, path)
}

// UnmountUnder unmounts every mount point under dir, deepest first.
func UnmountUnder(dir string) error { return unmountUnder(dir) }

// Poll calls f until it succeeds, ctx ends, timeout passes or f fails with one of the fatal
// errors, and returns f's last error.
func Poll(ctx context.Context, timeout time.Duration, f func(context.Context) error, fatal ...error) error {
	return poll(ctx, timeout, f, fatal...)
}

// Tail is the last n bytes of b, for error messages quoting a log.
func Tail(b []byte, n int) string { return tail(b, n) }
