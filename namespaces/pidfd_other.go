//go:build !linux

package namespaces

import (
	"errors"
	"fmt"
	"syscall"
)

// Process needs Linux's pidfd.
type Process struct{ pid int }

// OpenProcess needs Linux.
func OpenProcess(pid int) (*Process, error) {
	return nil, fmt.Errorf("pid %d: %w", pid, errors.ErrUnsupported)
}

// PID is the process ID the handle was opened on.
func (p *Process) PID() int { return p.pid }

// InCgroupMatching needs Linux.
func (p *Process) InCgroupMatching(string) (bool, error) { return false, errors.ErrUnsupported }

// Signal needs Linux.
func (p *Process) Signal(syscall.Signal) error { return errors.ErrUnsupported }

// Close does nothing.
func (p *Process) Close() error { return nil }
