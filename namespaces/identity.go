package namespaces

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrNoProcess means the process is gone (or was never visible from
// crishim's /proc): the caller decides whether that is an exit or a
// misconfiguration.
var ErrNoProcess = errors.New("no such process")

// ID identifies one namespace: two processes are in the same namespace of a
// kind exactly when their IDs for that kind are equal.
type ID struct {
	Dev uint64
	Ino uint64
}

// String is how the kernel names it in /proc/<pid>/ns links, "pid:[4026531836]".
func (id ID) String() string { return "pid:[" + strconv.FormatUint(id.Ino, 10) + "]" }

// PIDPath is the file that holds pid's PID namespace, as an OCI spec's
// linux.namespaces path or for setns(2).
func PIDPath(pid int) string { return fmt.Sprintf("/proc/%d/ns/pid", pid) }
