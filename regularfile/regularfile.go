// Package regularfile opens files that must be regular files (the config file, the
// allowlist file, the audit log) without ever blocking on one that is not: a FIFO would
// block an open or a read for ever, and a device such as /dev/zero would never end.
package regularfile

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// NotRegularError says that a path names something other than a regular file.
type NotRegularError struct {
	Path string
	Kind string // "a FIFO", "a directory", ...
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is not a regular file (%s)", e.Path, e.Kind)
}

// Open opens path with flag and perm and refuses anything but a regular file with a
// *NotRegularError. O_NONBLOCK keeps the open itself from waiting: a FIFO without a peer
// would block it (a write-only open of one fails at once with ENXIO instead), and so could
// a device.
func Open(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NONBLOCK, perm)
	switch {
	case errors.Is(err, syscall.ENXIO):
		return nil, &NotRegularError{Path: path, Kind: Kind(os.ModeNamedPipe)}
	case errors.Is(err, syscall.EISDIR):
		return nil, &NotRegularError{Path: path, Kind: Kind(os.ModeDir)}
	case err != nil:
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, &NotRegularError{Path: path, Kind: Kind(fi.Mode())}
	}
	return f, nil
}

// Kind names what a file of mode m is, for errors.
func Kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m.IsRegular():
		return "a regular file"
	}
	return "mode " + m.String()
}
