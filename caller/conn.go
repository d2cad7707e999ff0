package caller

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every
// Linux architecture (the kernel converts to it for userspace).
const clockTicks = 100

// FromConn identifies the peer of nc, a unix socket: its credentials from
// the socket, the rest from /proc. It costs a few getsockopts and small
// reads, once per connection. An error means nc carries no credentials
// (not a unix socket); a peer that is gone still has its pid, uid and gid.
//
// The pid of SO_PEERCRED is a number the peer may have given back (exited)
// and another process taken by the time crishim reads /proc. Where the
// kernel has SO_PEERPIDFD (Linux 6.5), crishim holds a pidfd of the very
// process that connected and keeps what it read only if that process was
// still running after the reads: a running process keeps its pid, so what
// /proc/<pid> said was its own. Without it, Read's checks (start time, uid
// and gid) are the best that can be done.
func FromConn(nc net.Conn) (*Process, error) {
	return fromConn(nc, "/proc", true)
}

// fromConn is FromConn; usePidfd false plays a kernel without SO_PEERPIDFD.
func fromConn(nc net.Conn, procRoot string, usePidfd bool) (*Process, error) {
	var (
		cred  Cred
		pidfd = -1
	)
	err := control(nc, func(fd int) error {
		uc, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			return err
		}
		cred = Cred{PID: uc.Pid, UID: uc.Uid, GID: uc.Gid}
		if usePidfd && cred.PID > 0 {
			// ENOPROTOOPT: a kernel before 6.5. ESRCH and others: the
			// peer is gone (kernels before 6.16 give no pidfd of an
			// exited process).
			pidfd, err = unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEERPIDFD)
			switch {
			case err == nil:
			case errors.Is(err, unix.ENOPROTOOPT), errors.Is(err, unix.EINVAL):
				pidfd = -1 // no SO_PEERPIDFD: Read's checks
			default:
				pidfd = -2 // the peer is gone
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	switch {
	case pidfd >= 0:
		defer unix.Close(pidfd)
		return ReadWhile(procRoot, cred, func() bool { return running(pidfd) }), nil
	case pidfd == -2:
		return &Process{PID: cred.PID, UID: cred.UID, GID: cred.GID, Exited: true}, nil
	}
	return Read(procRoot, cred, nowTicks()), nil
}

// control runs f on nc's file descriptor.
func control(nc net.Conn, f func(fd int) error) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return fmt.Errorf("%T is not a socket", nc)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	cerr := rc.Control(func(fd uintptr) { ferr = f(int(fd)) })
	return errors.Join(cerr, ferr)
}

// running says whether the process pidfd refers to has not exited: a
// pidfd polls readable once its process has exited (a zombie included).
func running(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n == 0
	}
}

// nowTicks is the time since boot in clock ticks, rounded up: a process
// that started before now never counts as later.
func nowTicks() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return ^uint64(0) // no check rather than a wrong one
	}
	return uint64(ts.Sec)*clockTicks + uint64(ts.Nsec)/(1e9/clockTicks) + 1
}
