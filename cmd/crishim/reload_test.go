package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/sys/unix"

	"github.com/crishim/crishim/allowlist"
	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/test/lockedbuf"
)

// replaceFile renames new content over path, as a ConfigMap update does.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReload: a change of the config file puts the reloadable settings in
// force (log level, allowlist patterns, audit settings) and names the
// others as needing a restart; a bad file keeps the settings in force;
// SIGHUP reloads an unchanged file; a change of the allowlist file is
// read; each is counted.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	allowFile := filepath.Join(dir, "allow")
	replaceFile(t, allowFile, "debian\n")
	file := filepath.Join(dir, "config.toml")
	auditPath := filepath.Join(dir, "audit.log")
	conf := func(level, allow, listen string, execSync bool) string {
		return fmt.Sprintf("version = 1\nlog-level = %q\ndebug-image-allowlist = %q\nlisten = %q\naudit-log = %q\naudit-exec-sync = %v\n", level, allow, listen, auditPath, execSync)
	}
	replaceFile(t, file, conf("info", "alpine", "/run/a.sock", false))
	src, ld := loadConfigFile(t, file)
	level := new(slog.LevelVar)
	level.Set(ld.cfg.logLevel)
	var logs lockedbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	auditLog, err := audit.Open(ld.cfg.audit.Config, metrics.NewAudit(prometheus.NewRegistry()), log)
	if err != nil {
		t.Fatal(err)
	}
	defer auditLog.Close()
	policy := ld.cfg.debugImages.policy
	reg := prometheus.NewRegistry()
	m := metrics.NewConfig(reg)
	hup := make(chan os.Signal, 1)
	r := &reloader{src: src, level: level, hup: hup, poll: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.start(ctx, ld, policy, auditLog, m, log)

	allows := func(image string) bool { _, ok := policy.Match(image); return ok }
	reloads := func(result string, n int) func() bool {
		want := fmt.Sprintf(`crishim_config_reloads_total{result=%q} %d`, result, n)
		return func() bool {
			b, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, "crishim_config_reloads_total")
			if err != nil {
				t.Fatal(err)
			}
			return strings.Contains(string(b), want+"\n")
		}
	}
	if level.Level() != slog.LevelInfo || !allows("alpine") || allows("busybox") || auditLog.ExecSync() {
		t.Fatalf("at start: level %v, alpine %v, busybox %v, exec sync %v", level.Level(), allows("alpine"), allows("busybox"), auditLog.ExecSync())
	}

	replaceFile(t, file, conf("debug", "busybox", "/run/b.sock", true)+fmt.Sprintf("debug-image-allowlist-file = %q\n", allowFile))
	waitUntil(t, "the changed file reloaded", reloads("success", 1))
	if level.Level() != slog.LevelDebug || allows("alpine") || !allows("busybox") || !allows("debian") || !auditLog.ExecSync() {
		t.Errorf("after the change: level %v, alpine %v, busybox %v, debian %v, exec sync %v", level.Level(), allows("alpine"), allows("busybox"), allows("debian"), auditLog.ExecSync())
	}
	if l := logs.String(); !strings.Contains(l, `msg="setting changed; it needs a restart to take effect" feature=config key=listen running=/run/a.sock configured=/run/b.sock`) {
		t.Errorf("no restart warning for listen:\n%s", l)
	}

	replaceFile(t, allowFile, "fedora\n")
	waitUntil(t, "the allowlist file re-read", reloads("success", 2))
	if !allows("fedora") || allows("debian") || !allows("busybox") {
		t.Errorf("after the allowlist file changed: fedora %v, debian %v, busybox %v", allows("fedora"), allows("debian"), allows("busybox"))
	}

	replaceFile(t, file, conf("loud", "registry.corp/*", "/run/b.sock", false))
	waitUntil(t, "the bad file refused", reloads("failure", 1))
	if level.Level() != slog.LevelDebug || !allows("busybox") || allows("registry.corp/x") || !auditLog.ExecSync() {
		t.Errorf("a bad file changed the settings in force: level %v, busybox %v, registry.corp/x %v, exec sync %v", level.Level(), allows("busybox"), allows("registry.corp/x"), auditLog.ExecSync())
	}
	if l := logs.String(); !strings.Contains(l, `key \"log-level\": \"loud\"`) {
		t.Errorf("the failure does not name the key:\n%s", l)
	}

	// SIGHUP reloads without a change seen: a reloader that never polls.
	cancel()
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	r = &reloader{src: src, level: level, hup: hup, poll: time.Hour}
	r.start(ctx, ld, policy, auditLog, m, log)
	replaceFile(t, file, conf("warn", "registry.corp/*", "/run/a.sock", false))
	hup <- syscall.SIGHUP
	waitUntil(t, "SIGHUP reloaded", reloads("success", 3))
	if level.Level() != slog.LevelWarn || !allows("registry.corp/x") || allows("busybox") || auditLog.ExecSync() {
		t.Errorf("after SIGHUP: level %v, registry.corp/x %v, busybox %v, exec sync %v", level.Level(), allows("registry.corp/x"), allows("busybox"), auditLog.ExecSync())
	}
}

// TestReloadRefusesNonRegular: a config file replaced by a FIFO or by a
// symlink to /dev/zero is refused at the next poll, at once (no read
// blocks, nothing unbounded is read), logged with the file and counted;
// the settings in force stay.
func TestReloadRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.toml")
	replaceFile(t, file, "version = 1\nlog-level = \"warn\"\n")
	src, ld := loadConfigFile(t, file)
	level := new(slog.LevelVar)
	level.Set(ld.cfg.logLevel)
	var logs lockedbuf.Buffer
	reg := prometheus.NewRegistry()
	m := metrics.NewConfig(reg)
	r := &reloader{src: src, level: level, hup: make(chan os.Signal), poll: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.start(ctx, ld, ld.cfg.debugImages.policy, nil, m, slog.New(slog.NewTextHandler(&logs, nil)))
	swaps := []struct {
		what string
		make func(tmp string) error
	}{
		{"a FIFO", func(tmp string) error { return syscall.Mkfifo(tmp, 0o600) }},
		{"a character device", func(tmp string) error { return os.Symlink("/dev/zero", tmp) }},
	}
	for i, sw := range swaps {
		tmp := file + ".tmp"
		if err := sw.make(tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { r.check(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("the reloader blocks on %s", sw.what)
		}
		b, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, "crishim_config_reloads_total")
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`crishim_config_reloads_total{result="failure"} %d`, i+1); !strings.Contains(string(b), want) {
			t.Errorf("after %s: %s, want %s", sw.what, b, want)
		}
		if l := logs.String(); !strings.Contains(l, file+" is not a regular file ("+sw.what+")") {
			t.Errorf("after %s, the log does not name the file and what it is:\n%s", sw.what, l)
		}
		if level.Level() != slog.LevelWarn {
			t.Errorf("after %s: level %v, want the one in force (warn)", sw.what, level.Level())
		}
		r.unreadable = false // report the next swap too
	}
}

// TestReloadTellsSystemdOnceServing: a reload says RELOADING=1 and then READY=1 to
// $NOTIFY_SOCKET, but only once crishim has said READY=1 for its start: a SIGHUP kept
// from start must not make systemd think crishim ready before its socket is.
func TestReloadTellsSystemdOnceServing(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.toml")
	replaceFile(t, file, "version = 1\n")
	src, ld := loadConfigFile(t, file)
	name := "@crishim-reload-test-" + filepath.Base(filepath.Dir(file))
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	t.Setenv("NOTIFY_SOCKET", name)
	// A datagram sent is queued before the send returns: what is not there now never was.
	raw, err := sock.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	queued := func() []string {
		var got []string
		buf := make([]byte, 512)
		for {
			var n int
			var rerr error
			if err := raw.Read(func(fd uintptr) bool {
				n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
				return true // never wait
			}); err != nil || rerr != nil {
				return got
			}
			first, _, _ := strings.Cut(string(buf[:n]), "\n")
			got = append(got, first)
		}
	}
	r := &reloader{src: src, level: new(slog.LevelVar)}
	r.running, r.data = ld.values(), ld.data
	r.policy, r.metrics, r.log = ld.cfg.debugImages.policy, metrics.NewConfig(prometheus.NewRegistry()), slog.New(slog.DiscardHandler)

	r.reload("SIGHUP")
	if got := queued(); len(got) != 0 {
		t.Errorf("before serving, a reload told systemd %q", got)
	}
	r.serving.Store(true)
	r.reload("SIGHUP")
	if got := queued(); strings.Join(got, " ") != "RELOADING=1 READY=1" {
		t.Errorf("a reload told systemd %q, want RELOADING=1 then READY=1", got)
	}
}

// loadConfigFile loads the settings as crishim does with --config file (and no metrics
// server).
func loadConfigFile(t *testing.T, file string) (source, loaded) {
	t.Helper()
	src, err := sourceOf([]string{"--config", file, "--metrics-address", ""})
	if err != nil {
		t.Fatal(err)
	}
	ld, err := src.load()
	if err != nil {
		t.Fatal(err)
	}
	return src, ld
}

// auditRecorder is an auditLog that keeps what a reload handed it.
type auditRecorder struct{ cfg audit.Config }

func (a *auditRecorder) Reconfigure(cfg audit.Config) { a.cfg = cfg }
func (a *auditRecorder) Reopen()                      {}

// reloadProbe is what a reload acts on, to be looked at afterwards.
type reloadProbe struct {
	level  *slog.LevelVar
	policy *allowlist.Policy
	audit  *auditRecorder
}

// inForceChecks says, for each reloadable key, a value for the config file
// and how to see it in force after a reload. TestReloadPutsEachKeyInForce
// demands one for every key that reloads declares: a key is reloadable
// when a reload applies it, and applied only when declared.
func inForceChecks(dir string) map[string]struct {
	value   string
	inForce func(p reloadProbe) bool
} {
	allowFile := filepath.Join(dir, "allow")
	return map[string]struct {
		value   string
		inForce func(p reloadProbe) bool
	}{
		"log-level":                  {"debug", func(p reloadProbe) bool { return p.level.Level() == slog.LevelDebug }},
		"debug-image-allowlist":      {"busybox", func(p reloadProbe) bool { _, ok := p.policy.Match("busybox"); return ok }},
		"debug-image-allowlist-file": {allowFile, func(p reloadProbe) bool { _, ok := p.policy.Match("debian"); return ok }},
		"audit-exec-sync":            {"true", func(p reloadProbe) bool { return p.audit.cfg.ExecSync }},
		"audit-required":             {"true", func(p reloadProbe) bool { return p.audit.cfg.Required }},
		"audit-log-maxsize":          {"7", func(p reloadProbe) bool { return p.audit.cfg.MaxSizeMB == 7 }},
		// Not reloadable: the same reload must leave these as they run.
		"audit-log-maxbackup": {"3", func(p reloadProbe) bool { return p.audit.cfg.MaxBackups == 3 }},
		"audit-cri-calls":     {"all", func(p reloadProbe) bool { return p.audit.cfg.CRICalls == "all" }},
	}
}

// TestReloadPutsEachKeyInForce: the keys docs/flags.md#reload promises a
// reload puts in force are those the features declare (reloads), and each
// is put in force by a reload that changes it alone, and logged as
// reloaded; a key not declared is logged as needing a restart and not put
// in force, even by a feature whose apply could (the audit log's takes all
// of audit.Config).
func TestReloadPutsEachKeyInForce(t *testing.T) {
	dir := t.TempDir()
	replaceFile(t, filepath.Join(dir, "allow"), "debian\n")
	checks := inForceChecks(dir)
	documented := documentedReloadable(t)
	var declared []string
	for _, rl := range reloads {
		declared = append(declared, rl.keys...)
	}
	slices.Sort(declared)
	if !slices.Equal(declared, documented) {
		t.Errorf("the keys reloads declare, %q, are not those docs/flags.md#reload says a reload puts in force, %q", declared, documented)
	}
	for _, k := range documented {
		if _, ok := checks[k]; !ok {
			t.Errorf("reloadable key %s has no check in inForceChecks: say how a reload is seen to put it in force", k)
		}
	}
	base := fmt.Sprintf("version = 1\naudit-log = %q\n", filepath.Join(dir, "audit.log"))
	for key, c := range checks {
		t.Run(key, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "config.toml")
			replaceFile(t, file, base)
			src, ld := loadConfigFile(t, file)
			var logs lockedbuf.Buffer
			p := reloadProbe{level: new(slog.LevelVar), policy: ld.cfg.debugImages.policy, audit: &auditRecorder{cfg: ld.cfg.audit.Config}}
			p.level.Set(ld.cfg.logLevel)
			r := &reloader{src: src, level: p.level}
			r.running, r.data = ld.values(), ld.data
			r.policy, r.audit = p.policy, p.audit
			r.metrics, r.log = metrics.NewConfig(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(&logs, nil)).With("feature", "config")
			if c.inForce(p) {
				t.Fatalf("%s = %s is in force before the reload", key, c.value)
			}

			value := c.value
			if ld.fs.Lookup(key).Value.Type() == "string" {
				value = strconv.Quote(value)
			}
			replaceFile(t, file, base+key+" = "+value+"\n")
			r.reload("test")
			reloaded := strings.Contains(logs.String(), `msg="setting reloaded" feature=config key=`+key+" ")
			restart := strings.Contains(logs.String(), `msg="setting changed; it needs a restart to take effect" feature=config key=`+key+" ")
			want := slices.Contains(documented, key)
			if got := c.inForce(p); got != want || reloaded != want || restart == want {
				t.Errorf("after a reload changing only %s: in force %v, logged reloaded %v, logged needs a restart %v; want reloadable %v\n%s",
					key, got, reloaded, restart, want, logs.String())
			}
		})
	}
}

// documentedReloadable are the keys of the table in docs/flags.md#reload,
// sorted.
func documentedReloadable(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/flags.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n### Reload\n")
	if !ok {
		t.Fatal("docs/flags.md has no Reload section")
	}
	key := regexp.MustCompile("`([a-z0-9-]+)`")
	var keys []string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "### ") {
			break
		}
		if first, _, ok := strings.Cut(strings.TrimPrefix(line, "| "), " | "); ok && strings.HasPrefix(line, "| `") {
			for _, m := range key.FindAllStringSubmatch(first, -1) {
				keys = append(keys, m[1])
			}
		}
	}
	if len(keys) == 0 {
		t.Fatal("docs/flags.md#reload has no table of keys")
	}
	slices.Sort(keys)
	return keys
}
