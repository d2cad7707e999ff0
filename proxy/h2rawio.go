package proxy

import (
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawReader and rawWriter read and write a socket the relay owns with raw system calls,
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
//
// The reader and the writer keep the state of the system call in flight
// and the function RawConn runs, made once: a closure per call would be
// two allocations per read and per write.
type rawReader struct {
	rc syscall.RawConn
	do func(fd uintptr) bool
	p  []byte
	n  int
	e  syscall.Errno
}

type rawWriter struct {
	nc      net.Conn
	rc      syscall.RawConn
	do      func(fd uintptr) bool
	p       []byte
	written int
	wait    bool
	full    bool
	e       syscall.Errno
}

// writeTimeout bounds how long a write may wait for a peer that takes no
// bytes: a gRPC peer reads all the time (flow control, not its socket,
// holds its sender back), so one that stops is stuck or hostile, and a
// writer waiting on it forever would hold the session with it.
const writeTimeout = 30 * time.Second

// newRawIO returns the raw reader and writer of nc, or nc itself when it
// has no file descriptor (crishim's in-memory connection).
func newRawIO(nc net.Conn) (io.Reader, io.Writer) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nc, deadlineWriter{nc}
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nc, deadlineWriter{nc}
	}
	r := &rawReader{rc: rc}
	r.do = r.read
	w := &rawWriter{nc: nc, rc: rc}
	w.do = w.write
	return r, w
}

// deadlineWriter puts writeTimeout on every write to a connection that
// has no raw path.
type deadlineWriter struct{ nc net.Conn }

func (w deadlineWriter) Write(p []byte) (int, error) {
	_ = w.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	return w.nc.Write(p)
}

func (r *rawReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.p = p
	err := r.rc.Read(r.do)
	n, errno := r.n, r.e
	r.p, r.n, r.e = nil, 0, 0
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

func (r *rawReader) read(fd uintptr) bool {
	for {
		m, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
		if e == unix.EINTR {
			continue
		}
		r.n, r.e = int(m), e
		return e != unix.EAGAIN
	}
}

// Write writes all of p. The deadline is set only once the socket is
// full, so a write that does not wait costs no timer.
func (w *rawWriter) Write(p []byte) (int, error) {
	written, full, err := w.writeAll(p, false)
	if err != nil || !full {
		return written, err
	}
	_ = w.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	n, _, err := w.writeAll(p[written:], true)
	_ = w.nc.SetWriteDeadline(time.Time{})
	return written + n, err
}

// writeAll writes p until done, an error, or (unless wait) a full socket.
func (w *rawWriter) writeAll(p []byte, wait bool) (written int, full bool, err error) {
	if len(p) == 0 {
		return 0, false, nil
	}
	w.p, w.wait = p, wait
	err = w.rc.Write(w.do)
	written, full, errno := w.written, w.full, w.e
	w.p, w.written, w.full, w.e = nil, 0, false, 0
	if err != nil {
		return written, full, fmt.Errorf("write: %w", err)
	}
	if errno != 0 {
		return written, full, fmt.Errorf("write: %w", errno)
	}
	return written, full, nil
}

func (w *rawWriter) write(fd uintptr) bool {
	for w.written < len(w.p) {
		rest := w.p[w.written:]
		m, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&rest[0])), uintptr(len(rest)))
		switch e {
		case 0:
			w.written += int(m)
		case unix.EINTR:
		case unix.EAGAIN:
			w.full = true
			return !w.wait // wait until the socket takes more
		default:
			w.e = e
			return true
		}
	}
	return true
}
