package streaming

import (
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// spliceMax is the most one splice(2) moves, and the pipe's size.
const spliceMax = 1 << 20

// spliceCounted copies src to dst through a pipe with splice(2) until src
// ends, counting each chunk, when both are sockets (ok false otherwise,
// before anything moved). It is what net's own splice does, with raw system
// calls: exec output arrives in 4 KiB frames, and on a small node the
// syscall path's bookkeeping per frame (waking Go's sysmon thread after
// every idle moment) cost as much CPU as the copy itself. The sockets and
// the pipe are non-blocking, so no call blocks a thread; waiting is left to
// Go's poller through RawConn, which also keeps deadlines and Close
// working.
func spliceCounted(dst io.Writer, src io.Reader, count func(int64)) (written int64, err error, ok bool) {
	in, okIn := rawConn(src)
	out, okOut := rawConn(dst)
	if !okIn || !okOut {
		return 0, nil, false
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return 0, nil, false
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	// A bigger pipe moves bulk output in fewer calls; the default (64 KiB)
	// still works if the system refuses.
	_, _ = unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, spliceMax)
	for {
		var n int
		var errno syscall.Errno
		rerr := in.Read(func(fd uintptr) bool {
			n, errno = rawSplice(int(fd), p[1], spliceMax)
			return errno != unix.EAGAIN
		})
		switch {
		case rerr != nil:
			return written, rerr, true
		case errno != 0:
			return written, errno, true
		case n == 0:
			return written, nil, true // src ended
		}
		for left := n; left > 0; {
			var m int
			werr := out.Write(func(fd uintptr) bool {
				m, errno = rawSplice(p[0], int(fd), left)
				return errno != unix.EAGAIN
			})
			if werr == nil && errno != 0 {
				werr = errno
			}
			if werr != nil {
				// What is in the pipe never reached dst: not counted.
				return written, werr, true
			}
			left -= m
			written += int64(m)
			count(int64(m))
		}
	}
}

// rawSplice is one non-blocking splice(2), retried on EINTR.
func rawSplice(from, to, n int) (int, syscall.Errno) {
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(from), 0, uintptr(to), 0, uintptr(n),
			unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		if e != unix.EINTR {
			return int(r), e
		}
	}
}

// rawConn is the RawConn of a TCP or unix stream socket.
func rawConn(c any) (syscall.RawConn, bool) {
	switch c.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return nil, false
	}
	rc, err := c.(syscall.Conn).SyscallConn()
	return rc, err == nil
}
