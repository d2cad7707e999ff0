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
// the socket, the rest from /proc (Read). It costs a getsockopt and a few
// small reads, once per connection. An error means nc carries no
// credentials (not a unix socket); a peer that is gone still has its pid,
// uid and gid.
func FromConn(nc net.Conn) (*Process, error) {
	cred, err := PeerCred(nc)
	if err != nil {
		return nil, err
	}
	return Read("/proc", cred, nowTicks()), nil
}

// PeerCred reads SO_PEERCRED of a unix socket.
func PeerCred(nc net.Conn) (Cred, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return Cred{}, fmt.Errorf("peer credentials: %T is not a socket", nc)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return Cred{}, fmt.Errorf("peer credentials: %w", err)
	}
	var uc *unix.Ucred
	cerr := rc.Control(func(fd uintptr) {
		uc, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err = errors.Join(cerr, err); err != nil {
		return Cred{}, fmt.Errorf("peer credentials: %w", err)
	}
	return Cred{PID: uc.Pid, UID: uc.Uid, GID: uc.Gid}, nil
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
