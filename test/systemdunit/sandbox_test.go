package systemdunit

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSandboxSettings(t *testing.T) {
	hostPath := root(t, map[string]string{"/etc/systemd/system/k.service": `[Service]
Type=notify
ExecStart=/bin/k
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ReadWritePaths=-/nonexistent/a /proc
RuntimeDirectory=k
RuntimeDirectoryMode=0750
LogsDirectory=k k/sub
LogsDirectoryMode=0700
StateDirectory=gone
StateDirectory=
`})
	s, err := Load("k.service", hostPath)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := s.Sandbox.resolved()
	if err != nil {
		t.Fatal(err)
	}
	if s.Type != "notify" || sb.ProtectSystem != "strict" || sb.ProtectHome != "yes" || !sb.PrivateTmp {
		t.Errorf("Type %q ProtectSystem %q ProtectHome %q PrivateTmp %v", s.Type, sb.ProtectSystem, sb.ProtectHome, sb.PrivateTmp)
	}
	want := []Directory{{"RuntimeDirectory", "/run/k", 0o750}, {"LogsDirectory", "/var/log/k", 0o700}, {"LogsDirectory", "/var/log/k/sub", 0o700}}
	if !reflect.DeepEqual(sb.Directories, want) {
		t.Errorf("directories %+v, want %+v", sb.Directories, want)
	}
	if got, want := sb.Env(), []string{"RUNTIME_DIRECTORY=/run/k", "LOGS_DIRECTORY=/var/log/k:/var/log/k/sub"}; !reflect.DeepEqual(got, want) {
		t.Errorf("env %q, want %q", got, want)
	}
	ms, err := sb.Mounts(Placement{State: "/state"})
	if err != nil {
		t.Fatal(err)
	}
	var writable []string
	for _, m := range ms {
		if m.Op == Writable {
			writable = append(writable, m.Target)
		}
	}
	// The missing optional ReadWritePaths= entry is skipped.
	if want := []string{"/dev", "/proc", "/sys", "/run/k", "/var/log/k", "/var/log/k/sub", "/proc", "/tmp", "/var/tmp"}; !reflect.DeepEqual(writable, want) {
		t.Errorf("writable again under ProtectSystem=strict: %q, want %q", writable, want)
	}

	for name, unit := range map[string]string{
		"unimplemented": "[Service]\nExecStart=/bin/k\nBindPaths=/a\n",
		"bad boolean":   "[Service]\nExecStart=/bin/k\nPrivateTmp=maybe\n",
		"absolute dir":  "[Service]\nExecStart=/bin/k\nLogsDirectory=/var/log/k\n",
		"dotdot dir":    "[Service]\nExecStart=/bin/k\nLogsDirectory=../k\n",
		"bad mode":      "[Service]\nExecStart=/bin/k\nLogsDirectoryMode=0999\n",
	} {
		s, err := Load("k.service", root(t, map[string]string{"/etc/systemd/system/k.service": unit}))
		if err == nil {
			_, err = s.Sandbox.Mounts(Placement{})
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestSandboxStart runs a shell in a sandbox and has it report what it may write: only
// its own directories and its private /tmp; /root is empty; a file put in
// place is read-only; a kept directory is visible under the private /var/tmp.
func TestSandboxStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mount namespaces need root")
	}
	keep, err := os.MkdirTemp("/var/tmp", "systemdunit-keep-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(keep)
	if err := os.WriteFile(filepath.Join(keep, "marker"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "k.toml")
	if err := os.WriteFile(conf, []byte("conf"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	sb := Sandbox{ProtectSystem: "strict", ProtectHome: "yes", PrivateTmp: true, Directories: []Directory{
		{Setting: "RuntimeDirectory", Path: "/run/systemdunit-test-k"},
		{Setting: "LogsDirectory", Path: "/var/log/systemdunit-test-k"},
	}, modes: map[string]os.FileMode{"LogsDirectory": 0o700}}
	script := `
w() { if (echo x > "$1") 2>/dev/null; then echo "$1 writable"; else echo "$1 read-only"; fi; }
w /etc/systemdunit-test; w /usr/systemdunit-test; w /run/systemdunit-test
w /run/systemdunit-test-k/f; w /var/log/systemdunit-test-k/f; w /tmp/f; w /var/tmp/f; w /etc/k/k.toml
echo "tmp: $(ls -A /tmp) root: $(ls -A /root)"
cat /etc/k/k.toml ` + keep + `/marker; echo
echo "$RUNTIME_DIRECTORY $LOGS_DIRECTORY"
`
	var out strings.Builder
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Stdout, cmd.Stderr = &out, &out
	p, err := sb.Start(cmd, Placement{State: state, Files: map[string]string{"/etc/k/k.toml": conf}, Keep: []string{keep}})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if p.Err() != nil {
		t.Fatalf("%v\n%s", p.Err(), out.String())
	}
	want := `/etc/systemdunit-test read-only
/usr/systemdunit-test read-only
/run/systemdunit-test read-only
/run/systemdunit-test-k/f writable
/var/log/systemdunit-test-k/f writable
/tmp/f writable
/var/tmp/f writable
/etc/k/k.toml read-only
tmp: f root: 
confkept
/run/systemdunit-test-k /var/log/systemdunit-test-k
`
	if got := out.String(); got != want {
		t.Errorf("in the sandbox:\n%s\nwant:\n%s", got, want)
	}
	for p, mode := range map[string]os.FileMode{"/run/systemdunit-test-k": 0o755, "/var/log/systemdunit-test-k": 0o700} {
		fi, err := os.Stat(filepath.Join(state, p))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s made in %s: %v (%v), want mode %v", p, state, fi.Mode(), err, mode)
		}
		if _, err := os.Stat(filepath.Join(state, p, "f")); err != nil {
			t.Errorf("what the service wrote to %s is not in %s: %v", p, state, err)
		}
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists on the machine", p)
		}
	}
	for _, p := range []string{"/etc/k", "/tmp/f", "/etc/systemdunit-test", "/run/systemdunit-test"} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists on the machine", p)
		}
	}
}
