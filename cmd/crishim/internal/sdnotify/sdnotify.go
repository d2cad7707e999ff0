// Package sdnotify tells systemd how the service is doing (sd_notify(3)): a
// Type=notify unit is started once crishim says READY=1, which it says when
// its CRI socket accepts connections, so units ordered after crishim (the
// kubelet) start against a socket that answers. Without $NOTIFY_SOCKET
// (not run by systemd) every call does nothing.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The states crishim sends, as sd_notify(3) names them.
const (
	Ready     = "READY=1"
	Stopping  = "STOPPING=1"
	reloading = "RELOADING=1"
)

// Reloading is the state a reload begins with. systemd 253 and later want
// the monotonic time of the reload beside it (to match it with the
// `systemctl reload` that asked); older ones ignore the field.
func Reloading() string {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return fmt.Sprintf("%s\nMONOTONIC_USEC=%d", reloading, ts.Nano()/1000)
}

// Notify sends state to the socket $NOTIFY_SOCKET names (a path, or an
// abstract socket written with a leading @). It does nothing without one.
// The socket is a datagram socket on the service manager's side: one
// write, never blocking for long.
func Notify(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if addr[0] == '@' {
		addr = "\x00" + addr[1:]
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify %s: %w", os.Getenv("NOTIFY_SOCKET"), err)
	}
	defer conn.Close()
	// systemd reads its socket at once; a manager that does not must not
	// hold crishim's start or shutdown.
	if err := conn.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", os.Getenv("NOTIFY_SOCKET"), err)
	}
	return nil
}
