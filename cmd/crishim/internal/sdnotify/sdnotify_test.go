package sdnotify

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// listen makes a datagram socket as systemd's and points $NOTIFY_SOCKET at it.
func listen(t *testing.T, name, env string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", env)
	return c
}

func receive(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestNotifyPathSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c := listen(t, path, path)
	for _, state := range []string{Ready, Stopping} {
		if err := Notify(state); err != nil {
			t.Fatal(err)
		}
		if got := receive(t, c); got != state {
			t.Errorf("received %q, want %q", got, state)
		}
	}
}

func TestNotifyAbstractSocket(t *testing.T) {
	name := "crishim-sdnotify-test-" + filepath.Base(t.TempDir())
	c := listen(t, "@"+name, "@"+name)
	if err := Notify(Reloading()); err != nil {
		t.Fatal(err)
	}
	got := receive(t, c)
	lines := strings.Split(got, "\n")
	if len(lines) != 2 || lines[0] != "RELOADING=1" || !strings.HasPrefix(lines[1], "MONOTONIC_USEC=") || len(lines[1]) <= len("MONOTONIC_USEC=") {
		t.Errorf("received %q, want RELOADING=1 and MONOTONIC_USEC=<n>", got)
	}
}

func TestNotifyWithoutSocketDoesNothing(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if err := Notify(Ready); err != nil {
		t.Errorf("without $NOTIFY_SOCKET: %v", err)
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "absent"))
	if err := Notify(Ready); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("to a missing socket: %v, want an error naming it", err)
	}
}
