package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
)

// TestConfigReload: crishim started with --config puts an edit of the file
// in force without a restart (the debug image allowlist refuses, then
// permits, a debug container; audit-exec-sync audits ExecSync, then stops), names a changed key that needs a restart,
// keeps the settings in force when the file turns bad, reloads on SIGHUP,
// and counts each. (startCrishim's --log-level and --listen win over the
// file's keys.)
func TestConfigReload(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "config.toml")
	write := func(content string) {
		t.Helper()
		// Renamed over the old one, as a ConfigMap update does.
		if err := os.WriteFile(file+".tmp", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	head := fmt.Sprintf("version = 1\naudit-log = %q\n", auditPath)
	write(head + "debug-image-allowlist = \"registry.corp.example/debug/*\"\n")
	p := startCrishim(t, testbed.Endpoint, "--config", file)
	rs, _ := criClients(t, p.Endpoint)
	podID, pod, appID := podWithApp(t, rs, "config-reload")
	create := func(name string) error {
		cfg := debugConfig(name, appID, "exec sleep 3601")
		cfg.Image = &runtimeapi.ImageSpec{Image: testbed.BusyboxImage}
		_, err := rs.CreateContainer(ctx, podID, cfg, pod)
		return err
	}
	reloads := func(result string, n int) func() error {
		return func() error {
			want := fmt.Sprintf(`crishim_config_reloads_total{result=%q} %d`, result, n)
			if m := metricsText(t, p.Metrics); !strings.Contains(m, want+"\n") {
				return fmt.Errorf("want %s:\n%s", want, grepLines(m, "crishim_config"))
			}
			return nil
		}
	}
	// execSyncAudited runs an ExecSync (as an exec probe does) and says
	// whether the audit log recorded it.
	execSyncAudited := func(word string) bool {
		t.Helper()
		if _, _, err := rs.ExecSync(ctx, appID, []string{"echo", word}, 10*time.Second); err != nil {
			t.Fatalf("ExecSync: %v", err)
		}
		for _, ev := range readAudit(t, auditPath) {
			if ev.Kind == audit.KindExecSync && slices.Equal(ev.Argv, []string{"echo", word}) {
				return true
			}
		}
		return false
	}
	if err := create("dbg-a"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("debug container of %s with the first allowlist: %v; want PermissionDenied", testbed.BusyboxImage, err)
	}
	if execSyncAudited("before") {
		t.Error("ExecSync audited without audit-exec-sync")
	}

	write(head + fmt.Sprintf("debug-image-allowlist = %q\naudit-exec-sync = true\n", testbed.BusyboxImage))
	eventually(t, "the edited file is in force", reloads("success", 1))
	if err := create("dbg-b"); err != nil {
		t.Errorf("debug container of %s once the file allows it: %v", testbed.BusyboxImage, err)
	}
	// Its calls reached crishim's socket undecoded a moment ago: the reload
	// must turn on their interception, not only the flag.
	if !execSyncAudited("on") {
		t.Error("ExecSync not audited once audit-exec-sync reloaded on")
	}
	if l := p.Log(); !strings.Contains(l, `"msg":"setting reloaded","feature":"config","key":"debug-image-allowlist"`) {
		t.Errorf("no log of the allowlist's change:\n%s", l)
	}

	write(head + "debug-image-allowlist = \"registry.corp.example/debug/*\"\nlog-level = \"loud\"\n")
	eventually(t, "the bad file is refused", reloads("failure", 1))
	if err := create("dbg-c"); err != nil {
		t.Errorf("a bad file changed the allowlist in force: %v", err)
	}

	write(head + "debug-image-allowlist = \"registry.corp.example/debug/*\"\nstream-max-tokens = 5\n")
	eventually(t, "the fixed file is in force", reloads("success", 2))
	if err := create("dbg-d"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("debug container after the allowlist was narrowed again: %v; want PermissionDenied", err)
	}
	if execSyncAudited("off") {
		t.Error("ExecSync audited after audit-exec-sync reloaded off")
	}
	if l := p.Log(); !strings.Contains(l, `"msg":"setting changed; it needs a restart to take effect","feature":"config","key":"stream-max-tokens"`) {
		t.Errorf("no restart warning for stream-max-tokens:\n%s", l)
	}

	// SIGHUP reloads an unchanged file, and crishim lives on.
	if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "SIGHUP reloaded", reloads("success", 3))
	if _, err := rs.Version(ctx, ""); err != nil {
		t.Errorf("crishim after SIGHUP: %v", err)
	}
}
