//go:build !linux

package namespaces

import (
	"errors"
	"fmt"
)

// PIDNamespace needs Linux.
func PIDNamespace(pid int) (ID, error) {
	return ID{}, fmt.Errorf("pid %d: %w", pid, errors.ErrUnsupported)
}
