package namespaces

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Process is a handle on one process that stays about that process: it is a
// pidfd, so once the process is gone every call fails with ErrNoProcess
// instead of reaching whatever process is later given the same PID.
type Process struct {
	pid int
	fd  int
}

// OpenProcess takes a pidfd on pid (pidfd_open(2), Linux 5.3).
func OpenProcess(pid int) (*Process, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("pidfd_open %d: %w", pid, ErrNoProcess)
		}
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	return &Process{pid: pid, fd: fd}, nil
}

// InCgroupMatching reports whether the process belongs to a cgroup whose
// path contains s (a container ID: runtimes name container cgroups after
// it). The pidfd was opened before /proc was read and is checked alive
// after, so the answer is about this process even if its PID was reused in
// between: a live (or unreaped) process keeps its PID.
func (p *Process) InCgroupMatching(s string) (bool, error) {
	path := fmt.Sprintf("/proc/%d/cgroup", p.pid)
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("%s: %w", path, ErrNoProcess)
		}
		return false, fmt.Errorf("read cgroups: %w", err)
	}
	defer f.Close()
	found := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		if parts := strings.SplitN(sc.Text(), ":", 3); len(parts) == 3 && strings.Contains(parts[2], s) {
			found = true
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	if err := p.Signal(0); err != nil {
		return false, err
	}
	return found, nil
}

// Signal sends sig to the process (pidfd_send_signal(2)); signal 0 only
// checks that it still exists.
func (p *Process) Signal(sig unix.Signal) error {
	if err := unix.PidfdSendSignal(p.fd, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pidfd_send_signal %d: %w", p.pid, ErrNoProcess)
		}
		return fmt.Errorf("pidfd_send_signal %d: %w", p.pid, err)
	}
	return nil
}

// Close releases the pidfd.
func (p *Process) Close() error {
	if err := unix.Close(p.fd); err != nil {
		return fmt.Errorf("close pidfd of %d: %w", p.pid, err)
	}
	return nil
}
