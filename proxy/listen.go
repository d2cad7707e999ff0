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
	path string
	lock *os.File
	// created is the socket file crishim made (Listen), removed on Close
	// if the path still names it; nil for a socket systemd passed
	// (ListenFile), whose file is systemd's to keep.
	created os.FileInfo
	once    sync.Once
	close   error
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
	lock, err := lockPath(path)
	if err != nil {
		return nil, err
	}
	l, err := listenFresh(path)
	if err != nil {
		lock.Close()
		return nil, err
	}
	// Go would unlink the path on Close whatever it names by then; Close
	// removes it only while it is still this socket.
	l.SetUnlinkOnClose(false)
	fi, err := os.Lstat(path)
	if err != nil {
		l.Close()
		lock.Close()
		return nil, fmt.Errorf("stat the new socket %s: %w", path, err)
	}
	return &Listener{Listener: l, path: path, lock: lock, created: fi}, nil
}

// ListenFile serves a listening socket systemd passed (crishim.socket,
// socket activation). It must be a unix stream socket bound to path (or to
// another name of the same file): the kubelet is configured with --listen's
// path, and a socket elsewhere would leave it talking to nothing, so a
// mismatch is an error rather than a warning. The socket file stays when
// crishim stops: systemd keeps listening on it, and the connections made
// until the next crishim runs wait in its backlog. f is crishim's to close.
func ListenFile(f *os.File, path string) (*Listener, error) {
	bound, err := checkPassedSocket(f)
	if err != nil {
		return nil, err
	}
	if bound != path && !sameFile(bound, path) {
		return nil, fmt.Errorf("systemd passed the socket %s but --listen is %s: "+
			"set listen to %s in the configuration, or ListenStream=%s in crishim.socket (the kubelet's endpoint must name the socket crishim serves)",
			bound, path, bound, path)
	}
	lock, err := lockPath(path)
	if err != nil {
		return nil, err
	}
	// A duplicate of f: systemd's own copy and f stay open until closed.
	l, err := net.FileListener(f)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("socket passed by systemd: %w", err)
	}
	return &Listener{Listener: l, path: path, lock: lock}, nil
}

// checkPassedSocket returns the path a passed socket is bound to, once it
// has checked that it is a listening unix stream socket (ListenStream=path).
func checkPassedSocket(f *os.File) (string, error) {
	fd := int(f.Fd())
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return "", fmt.Errorf("socket passed by systemd (fd %d): %w", fd, err)
	}
	un, ok := sa.(*unix.SockaddrUnix)
	if !ok || un.Name == "" || un.Name[0] == '@' || un.Name[0] == 0 {
		return "", fmt.Errorf("socket passed by systemd (fd %d) is not a unix socket with a path: want ListenStream=/path in crishim.socket", fd)
	}
	if typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_STREAM {
		return "", fmt.Errorf("socket passed by systemd at %s is not a stream socket (want ListenStream=, not ListenDatagram= or ListenSequentialPacket=)", un.Name)
	}
	if acc, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || acc != 1 {
		return "", fmt.Errorf("socket passed by systemd at %s is not listening (Accept=yes passes connections, crishim wants Accept=no)", un.Name)
	}
	return un.Name, nil
}

func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// lockPath takes path.lock. os.OpenFile sets close-on-exec itself. The lock
// closes the window between "nothing answers" and "remove the file" in which
// two starting crishims could both decide to take over the same path.
func lockPath(path string) (*os.File, error) {
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
	return lock, nil
}

func listenFresh(path string) (*net.UnixListener, error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("stat %s: %w", path, err)
	case fi.Mode()&os.ModeSocket == 0:
		return nil, fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
	default:
		// A socket systemd listens on (crishim.socket) answers too: the
		// kernel queues the connection. crishim run by hand beside it is
		// refused here rather than taking the kubelet's path away.
		conn, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			conn.Close()
			return nil, fmt.Errorf("another crishim (or another server, or systemd's crishim.socket) is running on %s: the socket answers", path)
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
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return l, nil
}

// Path is the socket's path.
func (l *Listener) Path() string { return l.path }

// Inherited says whether systemd passed the socket (ListenFile).
func (l *Listener) Inherited() bool { return l.created == nil }

// Close stops listening and releases the lock. A socket crishim created is
// removed, if the path still names it (not a socket something else has
// bound there since); one systemd passed stays, listening in systemd's
// hands. It is safe to call more than once (the server closes it on stop
// too).
func (l *Listener) Close() error {
	l.once.Do(func() {
		err := l.Listener.Close()
		if l.created != nil {
			if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.created) {
				if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
					err = errors.Join(err, rerr)
				}
			}
		}
		l.close = errors.Join(err, l.lock.Close())
	})
	return l.close
}
