package proxy

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Listener is crishim's kubelet-facing unix socket together with the lock
// that makes it crishim's own for the life of the process.
type Listener struct {
	net.Listener
	path  string
	lock  *os.File
	once  sync.Once
	close error
}

// Listen creates the socket at path with mode 0660. A socket file left by a
// crashed crishim is replaced; a live one (something answers on it, or
// another crishim holds the lock beside it) is an error, never stolen.
func Listen(path string) (*Listener, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("listen path %q must be absolute", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("create socket directory: %w", err)
	}
	// os.OpenFile sets close-on-exec itself. The lock closes the window between "nothing answers" and "remove
	// the file" in which two starting crishims could both decide to take
	// over the same path.
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another crishim is running on %s (it holds %s.lock)", path, path)
		}
		return nil, fmt.Errorf("lock %s.lock: %w", path, err)
	}
	l, err := listenFresh(path)
	if err != nil {
		lock.Close()
		return nil, err
	}
	return &Listener{Listener: l, path: path, lock: lock}, nil
}

func listenFresh(path string) (net.Listener, error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("stat %s: %w", path, err)
	case fi.Mode()&os.ModeSocket == 0:
		return nil, fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
	default:
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			conn.Close()
			return nil, fmt.Errorf("another crishim (or another server) is running on %s: the socket answers", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%s exists and cannot be probed, refusing to replace it: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	// Created with the right mode from the start: a chmod afterwards would
	// leave a moment in which the socket is open to everyone.
	old := unix.Umask(0o117)
	l, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return l, nil
}

// Path is the socket's path.
func (l *Listener) Path() string { return l.path }

// Close stops listening, removes the socket file and releases the lock.
// It is safe to call more than once (the gRPC server closes it on stop too).
func (l *Listener) Close() error {
	l.once.Do(func() {
		err := l.Listener.Close()
		if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		l.close = errors.Join(err, l.lock.Close())
	})
	return l.close
}
