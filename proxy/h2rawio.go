package proxy

import (
	"io"
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawIO reads and writes a socket the relay owns with raw system calls,
// still parking on Go's poller when the socket is not ready.
//
// Why: every read and write through net.Conn enters the scheduler's
// syscall path, and the first one after the process went idle (which, at
// the kubelet's pace, is every call) wakes Go's sysmon thread, which then
// polls every 20 µs until the process is idle again. On a small node that
// is a futex wake-up and a context switch on the critical path of each
// relayed call, and a fifth of crishim's CPU. The sockets are non-blocking
// (Go sets them so), so a raw read or write never blocks a thread, which is
// the one thing the syscall path exists to handle.
type rawIO struct {
	rc syscall.RawConn
}

// newRawIO returns the raw reader and writer of nc, or nc itself when it
// has no file descriptor (crishim's in-memory connection).
func newRawIO(nc net.Conn) (io.Reader, io.Writer) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nc, nc
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nc, nc
	}
	r := rawIO{rc: rc}
	return r, r
}

func (r rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			m, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			if e == unix.EINTR {
				continue
			}
			n, errno = int(m), e
			return e != unix.EAGAIN
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, errno
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (r rawIO) Write(p []byte) (int, error) {
	written := 0
	var errno syscall.Errno
	err := r.rc.Write(func(fd uintptr) bool {
		for written < len(p) {
			rest := p[written:]
			m, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)))
			switch e {
			case 0:
				written += int(m)
			case unix.EINTR:
			case unix.EAGAIN:
				return false // wait until the socket takes more
			default:
				errno = e
				return true
			}
		}
		return true
	})
	if err != nil {
		return written, err
	}
	if errno != 0 {
		return written, errno
	}
	return written, nil
}
