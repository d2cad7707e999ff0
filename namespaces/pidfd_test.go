package namespaces

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestProcessSignal(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	p, err := OpenProcess(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	// The child is in its parent's cgroup.
	lines := strings.Split(strings.TrimSpace(string(own)), "\n")
	path := lines[len(lines)-1][strings.LastIndex(lines[len(lines)-1], ":")+1:]
	if ok, err := p.InCgroupMatching(path); err != nil || !ok {
		t.Errorf("InCgroupMatching(%q) = %v, %v; want true", path, ok, err)
	}
	if ok, err := p.InCgroupMatching("no-such-container-0123456789"); err != nil || ok {
		t.Errorf("InCgroupMatching(unknown) = %v, %v; want false", ok, err)
	}

	if err := p.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("child ended with %v; want killed by SIGTERM", err)
	}
	// Reaped: the PID may be anyone's now, the pidfd still names the dead child.
	if err := p.Signal(0); !errors.Is(err, ErrNoProcess) {
		t.Errorf("Signal after exit = %v; want ErrNoProcess", err)
	}
	if _, err := p.InCgroupMatching(path); !errors.Is(err, ErrNoProcess) {
		t.Errorf("InCgroupMatching after exit = %v; want ErrNoProcess", err)
	}
}

func TestOpenMissingProcess(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip("no true binary:", err)
	}
	for _, pid := range []int{0, -1, cmd.Process.Pid} {
		if _, err := OpenProcess(pid); !errors.Is(err, ErrNoProcess) {
			t.Errorf("OpenProcess(%d) = %v; want ErrNoProcess", pid, err)
		}
	}
}
