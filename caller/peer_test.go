package caller

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary, started with these, plays a caller instead of running
// tests: it connects to the unix socket envConnect names, says so on
// stdout, and exits, or, with envHold, waits for its stdin to close first.
const (
	envConnect = "CRISHIM_CALLER_TEST_CONNECT"
	envHold    = "CRISHIM_CALLER_TEST_HOLD"
	envPIDNS   = "CRISHIM_CALLER_TEST_PIDNS" // running as PID 1 of a new PID namespace
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(envConnect); addr != "" {
		c, err := net.Dial("unix", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println("connected")
		if os.Getenv(envHold) != "" {
			_, _ = io.Copy(io.Discard, os.Stdin)
		}
		_ = c.Close()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// abstractListener listens on a fresh abstract unix socket, which any uid
// may connect to.
func abstractListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("unix", "@crishim-caller-test-"+rand.Text())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// startCaller starts exe (the test binary, or a copy) as a caller of l,
// and returns once it connected, with the accepted connection. hold keeps
// it running until the test ends.
func startCaller(t *testing.T, exe string, l net.Listener, hold bool, attr *syscall.SysProcAttr) (*exec.Cmd, net.Conn) {
	t.Helper()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envConnect+"="+l.Addr().String())
	if hold {
		cmd.Env = append(cmd.Env, envHold+"=1")
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	}
	cmd.SysProcAttr = attr
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "connected\n" {
		t.Fatalf("caller said %q, %v", line, err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return cmd, c
}

// TestKubeletIsInTheHostsMountNamespace: root's process whose executable is
// named kubelet is the kubelet in crishim's mount namespace, not in one of
// its own (a container's, where it names its files as it likes).
func TestKubeletIsInTheHostsMountNamespace(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: a mount namespace")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	kubelet := filepath.Join(t.TempDir(), "kubelet")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kubelet, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		attr *syscall.SysProcAttr
		want bool
	}{
		{"host", nil, true},
		{"container", &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, c := startCaller(t, kubelet, abstractListener(t), true, tc.attr)
			p, err := FromConn(c)
			if err != nil {
				t.Fatal(err)
			}
			if p.Exited || p.Exe != kubelet || p.Kubelet != tc.want {
				t.Errorf("caller %s: %s; want kubelet %v", kubelet, show(p), tc.want)
			}
		})
	}
}

// TestFromConnPidReused: a caller connects and exits, and its pid goes to
// another user's process before crishim reads /proc. The caller is recorded
// as exited, with the socket's pid, uid and gid, never as the other
// process: with a pidfd, and without (a kernel before 6.5).
//
// The test runs in a PID namespace of its own, where it can give the next
// process the pid it wants (ns_last_pid), with /proc mounted anew in a
// mount namespace of its own.
func TestFromConnPidReused(t *testing.T) {
	if os.Getenv(envPIDNS) == "" {
		if os.Getuid() != 0 {
			t.Skip("needs root: a PID namespace, another uid's process")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestFromConnPidReused$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), envPIDNS+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
		out, err := cmd.CombinedOutput()
		t.Logf("in a PID namespace:\n%s", out)
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	if os.Getpid() != 1 {
		t.Fatalf("pid %d, want 1 in a new PID namespace", os.Getpid())
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		t.Fatal(err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip(err)
	}
	for _, pidfd := range []bool{true, false} {
		t.Run(fmt.Sprintf("pidfd=%v", pidfd), func(t *testing.T) {
			l := abstractListener(t)
			caller, c := startCaller(t, os.Args[0], l, false, nil)
			if err := caller.Wait(); err != nil { // exited and reaped
				t.Fatal(err)
			}
			pid := caller.Process.Pid
			other := takePid(t, pid, sleep)
			p, err := fromConn(c, "/proc", pidfd)
			if err != nil {
				t.Fatal(err)
			}
			want := Process{PID: int32(pid), UID: 0, GID: 0, Exited: true}
			if !equal(p, &want) {
				t.Errorf("caller whose pid %d is now uid %d's %s: %s\nwant %s", pid, otherUID, other, show(p), show(&want))
			}
		})
	}
}

const otherUID = 4242

// takePid starts exe (sleep) as otherUID with the given pid, free now, and
// returns its description.
func takePid(t *testing.T, pid int, exe string) string {
	t.Helper()
	// Another thread of this process may take the pid first (threads
	// take pids too): then try again.
	for range 20 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe, "1000")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUID, Gid: otherUID}}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid == pid {
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			return exe
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	t.Fatalf("pid %d could not be taken", pid)
	return ""
}
