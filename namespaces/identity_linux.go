package namespaces

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// PIDNamespace returns the PID namespace of process pid, as seen from
// crishim's /proc (crishim must run in the host PID namespace for host PIDs
// reported by the runtime to mean anything).
func PIDNamespace(pid int) (ID, error) {
	if pid <= 0 {
		return ID{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	var st unix.Stat_t
	path := PIDPath(pid)
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH) {
			return ID{}, fmt.Errorf("%s: %w", path, ErrNoProcess)
		}
		return ID{}, fmt.Errorf("stat %s: %w", path, err)
	}
	// Stat_t.Dev is narrower than uint64 on some architectures.
	return ID{Dev: uint64(st.Dev), Ino: st.Ino}, nil
}
