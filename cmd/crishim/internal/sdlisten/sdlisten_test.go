package sdlisten

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// twoFDs returns two consecutive descriptors, without close-on-exec, as
// systemd passes them (a socket's number is the kernel's choice: dup2 puts
// them where the test wants them).
func twoFDs(t *testing.T) int {
	t.Helper()
	first := 100
	for i := range 2 {
		s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Dup2(s, first+i); err != nil {
			t.Fatal(err)
		}
		unix.Close(s)
		t.Cleanup(func() { unix.Close(first + i) })
	}
	return first
}

func TestSocketsTakesWhatSystemdPassed(t *testing.T) {
	first := twoFDs(t)
	pid := os.Getpid()
	socks, err := sockets(map[string]string{"LISTEN_PID": strconv.Itoa(pid), "LISTEN_FDS": "2", "LISTEN_FDNAMES": "crishim.socket:other"}, pid, first)
	if err != nil {
		t.Fatal(err)
	}
	if len(socks) != 2 || socks[0].Name != "crishim.socket" || socks[1].Name != "other" {
		t.Fatalf("got %+v, want crishim.socket and other", socks)
	}
	for i, s := range socks {
		if int(s.File.Fd()) != first+i {
			t.Errorf("socket %d is fd %d, want %d", i, s.File.Fd(), first+i)
		}
		flags, err := unix.FcntlInt(s.File.Fd(), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("fd %d not close-on-exec (%#x, %v): a child would inherit the socket", s.File.Fd(), flags, err)
		}
	}
}

func TestSocketsNamesMissingOrMismatched(t *testing.T) {
	for _, names := range []string{"", "one"} {
		first := twoFDs(t)
		pid := os.Getpid()
		socks, err := sockets(map[string]string{"LISTEN_PID": strconv.Itoa(pid), "LISTEN_FDS": "2", "LISTEN_FDNAMES": names}, pid, first)
		if err != nil || len(socks) != 2 || socks[0].Name != "unknown" || socks[1].Name != "unknown" {
			t.Errorf("LISTEN_FDNAMES=%q: %+v, %v; want two sockets named unknown", names, socks, err)
		}
	}
}

func TestSocketsNotOurs(t *testing.T) {
	pid := os.Getpid()
	for _, env := range []map[string]string{
		{},                  // not socket-activated
		{"LISTEN_FDS": "1"}, // no LISTEN_PID: sd_listen_fds ignores it too
		{"LISTEN_PID": strconv.Itoa(pid + 1), "LISTEN_FDS": "1"}, // left for a parent
	} {
		socks, err := sockets(env, pid, 100)
		if err != nil || socks != nil {
			t.Errorf("%v: %v, %v; want none", env, socks, err)
		}
	}
}

func TestSocketsBadEnvironment(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"LISTEN_PID": "x", "LISTEN_FDS": "1"}, "LISTEN_PID"},
		{map[string]string{"LISTEN_PID": pid, "LISTEN_FDS": "many"}, "LISTEN_FDS"},
		{map[string]string{"LISTEN_PID": pid, "LISTEN_FDS": "-1"}, "LISTEN_FDS"},
		// Nothing open at fd 1000: a wrong count is an error, not a crash later.
		{map[string]string{"LISTEN_PID": pid, "LISTEN_FDS": "1"}, "file descriptor 1000"},
	} {
		socks, err := sockets(c.env, os.Getpid(), 1000)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, %v; want an error naming %s", c.env, socks, err, c.want)
		}
	}
}

func TestSocketsUnsetsEnvironment(t *testing.T) {
	t.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()+1))
	t.Setenv("LISTEN_FDS", "1")
	t.Setenv("LISTEN_FDNAMES", "crishim.socket")
	if socks, err := Sockets(); err != nil || socks != nil {
		t.Fatalf("%v, %v", socks, err)
	}
	for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("%s=%q still set: a child would take the sockets for its own", k, v)
		}
	}
}
