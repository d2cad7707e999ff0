package proxy

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestListenCreatesSocketWithMode0660(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "crishim.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Errorf("mode %v, want socket 0660", fi.Mode())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket left behind after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestListenReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crishim.sock")
	// A socket file nobody listens on, as a crashed crishim leaves it.
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close()
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l.Close()
}

func TestListenRefusesToStealOrClobber(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.sock")
	other, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := Listen(live); err == nil || !strings.Contains(err.Error(), "running") {
		t.Errorf("live socket: %v, want an error saying something is running", err)
	}

	first := filepath.Join(dir, "crishim.sock")
	l, err := Listen(first)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := Listen(first); err == nil || !strings.Contains(err.Error(), "another crishim is running") {
		t.Errorf("second crishim on one socket: %v", err)
	}

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("regular file: %v", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "precious" {
		t.Error("regular file was clobbered")
	}
}

// TestListenCloseLeavesAnotherSocket: a socket bound at the path since
// crishim made its own (systemd's crishim.socket, which unlinks and binds
// when it starts) is not crishim's to remove.
func TestListenCloseLeavesAnotherSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crishim.sock")
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	other := heldSocket(t, path)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatalf("Close removed the socket bound at %s since: %v", path, err)
	}
	if held, _ := os.Stat(path); !os.SameFile(fi, held) {
		t.Error("the path changed")
	}
	other.Close()
}

// heldSocket is a listening socket at path as systemd holds crishim.socket's,
// returned as the file it passes.
func heldSocket(t *testing.T, path string) *os.File {
	t.Helper()
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	f, err := ul.File()
	if err != nil {
		t.Fatal(err)
	}
	ul.Close()
	t.Cleanup(func() { f.Close() })
	return f
}

// TestListenFileServesAndKeepsTheSocket: crishim serves the socket systemd
// passed, and closing it on stop neither removes the file nor stops the
// socket listening: a client connecting then waits in the backlog for the
// next crishim, which accepts it.
func TestListenFileServesAndKeepsTheSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crishim.sock")
	held := heldSocket(t, path)
	for i := range 2 {
		l, err := ListenFile(held, path)
		if err != nil {
			t.Fatal(err)
		}
		if !l.Inherited() || l.Path() != path {
			t.Errorf("Inherited %v, Path %s", l.Inherited(), l.Path())
		}
		if i == 1 {
			// Connected while no crishim ran (below): accepted now.
			c, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); err != nil {
			t.Fatalf("Close removed systemd's socket: %v", err)
		}
		if i == 0 {
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatalf("connect between two crishims: %v (refused: the socket stopped listening)", err)
			}
			defer c.Close()
		}
	}
}

func TestListenFileRefusesWhatIsNotTheKubeletSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "crishim.sock")
	held := heldSocket(t, path)
	other := filepath.Join(dir, "other.sock")
	if _, err := ListenFile(held, other); err == nil || !strings.Contains(err.Error(), "systemd passed the socket "+path+" but --listen is "+other) {
		t.Errorf("socket at another path: %v", err)
	}
	// Another name of the same file is the same socket.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	l, err := ListenFile(held, filepath.Join(link, "crishim.sock"))
	if err != nil {
		t.Errorf("the socket by another name: %v", err)
	} else {
		l.Close()
	}

	dgram, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "dgram.sock"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer dgram.Close()
	df, err := dgram.File()
	if err != nil {
		t.Fatal(err)
	}
	defer df.Close()
	if _, err := ListenFile(df, filepath.Join(dir, "dgram.sock")); err == nil || !strings.Contains(err.Error(), "not a stream socket") {
		t.Errorf("datagram socket: %v", err)
	}

	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	bound := filepath.Join(dir, "bound.sock")
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: bound}); err != nil {
		t.Fatal(err)
	}
	nf := os.NewFile(uintptr(fd), "bound")
	defer nf.Close()
	if _, err := ListenFile(nf, bound); err == nil || !strings.Contains(err.Error(), "not listening") {
		t.Errorf("bound, not listening: %v", err)
	}

	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	tf, err := tcp.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	if _, err := ListenFile(tf, path); err == nil || !strings.Contains(err.Error(), "not a unix socket") {
		t.Errorf("TCP socket: %v", err)
	}
}
