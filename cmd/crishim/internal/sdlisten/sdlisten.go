// Package sdlisten takes the listening sockets systemd passes to a
// socket-activated service, as sd_listen_fds(3) does: crishim.socket holds
// the kubelet's socket, so it keeps listening while crishim restarts and the
// connections made meanwhile wait in its backlog for the next crishim.
// Without $LISTEN_PID naming this process (not socket-activated) there are
// none.
package sdlisten

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// firstFD is SD_LISTEN_FDS_START: systemd passes its sockets from fd 3 on.
const firstFD = 3

// Socket is one passed socket and the name systemd gives it
// (FileDescriptorName=, the socket unit's name by default).
type Socket struct {
	File *os.File
	Name string
}

// Sockets returns the sockets systemd passed to this process, close-on-exec
// from now on, and unsets $LISTEN_PID, $LISTEN_FDS and $LISTEN_FDNAMES, so
// that no process crishim starts takes them for its own (sd_listen_fds with
// unset_environment). None when $LISTEN_PID is unset or names another
// process: the variables were left by a parent for itself.
func Sockets() ([]Socket, error) {
	env := map[string]string{}
	for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		env[k] = os.Getenv(k)
		os.Unsetenv(k)
	}
	return sockets(env, os.Getpid(), firstFD)
}

func sockets(env map[string]string, pid, first int) ([]Socket, error) {
	if env["LISTEN_PID"] == "" {
		return nil, nil
	}
	p, err := strconv.Atoi(env["LISTEN_PID"])
	if err != nil || p <= 0 {
		return nil, fmt.Errorf("LISTEN_PID=%q is not a process ID", env["LISTEN_PID"])
	}
	if p != pid {
		return nil, nil
	}
	n, err := strconv.Atoi(env["LISTEN_FDS"])
	if err != nil || n < 0 {
		return nil, fmt.Errorf("LISTEN_FDS=%q is not a number of file descriptors", env["LISTEN_FDS"])
	}
	// Names are optional (systemd before 227 sent none); a list that does
	// not match the count is ignored, as sd_listen_fds_with_names does.
	names := strings.Split(env["LISTEN_FDNAMES"], ":")
	if len(names) != n {
		names = make([]string, n)
		for i := range names {
			names[i] = "unknown"
		}
	}
	socks := make([]Socket, 0, n)
	for i := range n {
		fd := first + i
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
			for _, s := range socks {
				s.File.Close()
			}
			return nil, fmt.Errorf("LISTEN_FDS=%d: file descriptor %d: %w", n, fd, err)
		}
		socks = append(socks, Socket{File: os.NewFile(uintptr(fd), names[i]), Name: names[i]})
	}
	return socks, nil
}
