package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crishim/crishim/test/systemdunit"
)

// TestShippedUnitWithGovernance starts crishim as packaging/systemd/crishim.service starts
// it, under the unit's own sandboxing (read-only /, its runtime and logs directories
// writable, private /tmp, no /home or /root), with the governance settings of
// docs/governance.md in /etc/crishim/config.toml: the audit log in /var/log/crishim
// (required) and every session recorded under /var/log/crishim/sessions. systemd is not
// PID 1 on a test machine: test/systemdunit builds the unit's file system in a mount
// namespace of crishim's own, the unit's directories kept in a temporary directory.
//
// crishim tells "systemd" (a datagram socket in $NOTIFY_SOCKET, as for Type=notify)
// READY=1 once its CRI socket exists; an exec through it is audited and recorded; a
// reload says RELOADING=1 then READY=1; SIGTERM says STOPPING=1 and exits 0.
func TestShippedUnitWithGovernance(t *testing.T) {
	unitFile, err := filepath.Abs("../../packaging/systemd/crishim.service")
	if err != nil {
		t.Fatal(err)
	}
	hostPath := func(p string) string {
		if p == "/etc/systemd/system/crishim.service" {
			return unitFile
		}
		return filepath.Join("/nonexistent-unit-root", p) // nothing else: the unit alone
	}
	unit, err := systemdunit.Load("crishim.service", hostPath)
	if err != nil {
		t.Fatal(err)
	}
	if unit.Type != "notify" {
		t.Errorf("Type=%s, want notify: crishim says when its socket is ready", unit.Type)
	}
	start, err := unit.Start(hostPath)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	state := filepath.Join(dir, "root") // where the unit's /run/crishim and /var/log/crishim are kept
	config := filepath.Join(dir, "config.toml")
	// As docs/governance.md configures it, in front of the test bed's runtime.
	toml := fmt.Sprintf(`version = 1
runtime-endpoint = %q
containerd-address = %q
metrics-address = "127.0.0.1:0"
log-format = "json"
log-level = "debug"
audit-log = "/var/log/crishim/audit.log"
audit-required = true
record-sessions = "all"
`, testbed.Endpoint, testbed.ContainerdAddress)
	if err := os.WriteFile(config, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}

	notifyName := "crishim-e2e-notify-" + filepath.Base(dir)
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: "@" + notifyName, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	states := make(chan string, 16)
	go func() {
		defer close(states)
		buf := make([]byte, 4096)
		for {
			n, err := notify.Read(buf)
			if err != nil {
				return
			}
			states <- string(buf[:n])
		}
	}()

	logPath := filepath.Join(dir, "crishim.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(start.ExecStart.Argv[0], start.ExecStart.Argv[1:]...)
	cmd.Env = append(append(os.Environ(), start.Env...), "NOTIFY_SOCKET=@"+notifyName)
	cmd.Stdout, cmd.Stderr = logFile, logFile // the journal
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	keep := []string{filepath.Dir(testbed.Socket)} // a node's runtime socket is under /run, the bed's under /var/tmp
	if testbed.ContainerdAddress != "" {
		keep = append(keep, filepath.Dir(testbed.ContainerdAddress))
	}
	proc, err := unit.Sandbox.Start(cmd, systemdunit.Placement{
		State: state,
		Files: map[string]string{
			start.ExecStart.Argv[0]:    filepath.Join(binDir, "crishim"),
			"/etc/crishim/config.toml": config,
		},
		Keep: keep,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-proc.Done()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("crishim log:\n%s", b)
		}
	})
	socket := filepath.Join(state, "run/crishim/crishim.sock")

	// next waits for crishim's next notification; the timeout turns a hang into a
	// failure, it measures nothing.
	next := func(want string) {
		t.Helper()
		select {
		case got := <-states:
			if first, _, _ := strings.Cut(got, "\n"); first != want {
				t.Fatalf("crishim notified %q, want %s", got, want)
			}
		case <-proc.Done():
			t.Fatalf("crishim exited (%v) before notifying %s", proc.Err(), want)
		case <-time.After(time.Minute):
			t.Fatalf("crishim did not notify %s within a minute", want)
		}
	}
	next("READY=1")
	// Ready means the socket accepts connections: it must exist as the message arrives.
	if fi, err := os.Stat(socket); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("READY=1 arrived, but the CRI socket %s is not there: %v", socket, err)
	}

	// The pod is made and removed by the runtime directly: crishim is stopped before the
	// test ends.
	direct, _ := criClients(t, testbed.Endpoint)
	_, _, ctrID := podWithContainer(t, direct, "unit", sleeperScript)
	rs, _ := criClients(t, "unix://"+socket)
	auditPath := filepath.Join(state, "var/log/crishim/audit.log")
	_, end := recordedExec(t, rs, auditPath, ctrID, false, "echo", "from-the-unit")
	if !strings.HasPrefix(end.Recording, "/var/log/crishim/sessions/") {
		t.Fatalf("ended event's recording %q, want one in /var/log/crishim/sessions", end.Recording)
	}
	cast, err := os.ReadFile(filepath.Join(state, end.Recording))
	if err != nil || !strings.Contains(string(cast), "from-the-unit") {
		t.Errorf("recording %s: %v\n%s", end.Recording, err, cast)
	}
	for p, mode := range map[string]os.FileMode{
		"/run/crishim":               0o750,
		"/var/log/crishim":           0o700,
		"/var/log/crishim/sessions":  0o700,
		"/var/log/crishim/audit.log": 0o600,
		end.Recording:                0o600,
	} {
		if fi, err := os.Stat(filepath.Join(state, p)); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v (%v), want mode %v", p, fi.Mode().Perm(), err, mode)
		}
	}

	// systemctl reload.
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	next("RELOADING=1")
	next("READY=1")

	// systemctl stop.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next("STOPPING=1")
	<-proc.Done()
	if err := proc.Err(); err != nil {
		t.Errorf("crishim stopped with %v, want exit 0", err)
	}
	if warnings := logLines(t, logPath, "WARN", "ERROR"); len(warnings) > 0 {
		t.Errorf("crishim warned under the unit:\n%s", strings.Join(warnings, "\n"))
	}
}

// logLines returns crishim's JSON log lines at the given levels.
func logLines(t *testing.T, path string, levels ...string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec struct{ Level string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			continue
		}
		for _, l := range levels {
			if rec.Level == l {
				out = append(out, sc.Text())
			}
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		t.Fatal(err)
	}
	return out
}
