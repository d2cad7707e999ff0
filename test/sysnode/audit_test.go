package sysnode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/test/harness"
)

// TestAuditAndRecordingUnderShippedUnit: with the audit log and session recording turned on
// in /etc/crishim/config.toml (`systemctl restart crishim`: neither key is reloadable), a
// `kubectl exec` writes its started and ended events to /var/log/crishim/audit.log and a
// recording to /var/log/crishim/sessions, from crishim running in the package's unit with its
// real sandbox (ProtectSystem=strict: only its RuntimeDirectory= and LogsDirectory= are
// writable). This is what test/systemdunit emulates for TestShippedUnitWithGovernance.
func TestAuditAndRecordingUnderShippedUnit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out, err := testNode.NodeExec(ctx, "systemctl", "show", "-p", "FragmentPath", "-p", "ProtectSystem", "-p", "NoNewPrivileges", "-p", "LogsDirectory", "crishim")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FragmentPath=/lib/systemd/system/crishim.service", "ProtectSystem=strict", "NoNewPrivileges=yes", "LogsDirectory=crishim"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("crishim's unit: want %q in\n%s", want, out)
		}
	}
	cfg, err := testNode.NodeExec(ctx, "cat", "/etc/crishim/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	edited := string(cfg) + "audit-log = \"/var/log/crishim/audit.log\"\nrecord-sessions = \"all\"\n"
	if out, err := testNode.NodeExecStdin(ctx, []byte(edited), "sh", "-c", "cat > /etc/crishim/config.toml.new && mv /etc/crishim/config.toml.new /etc/crishim/config.toml && systemctl restart crishim"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := testNode.NodeExecStdin(ctx, cfg, "sh", "-c", "cat > /etc/crishim/config.toml && systemctl restart crishim"); err != nil {
			t.Errorf("restore crishim's config: %v: %s", err, out)
		}
	})

	runPod(ctx, t, "sysnode-audit", sleepPod("sysnode-audit"))
	out, err = testNode.Kubectl(ctx, nil, "exec", "sysnode-audit", "--", "echo", "from-the-unit")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "from-the-unit" {
		t.Fatalf("kubectl exec said %q", got)
	}

	// The ended event is written when the session's streams close, which may be just after
	// kubectl has returned.
	var started, ended *audit.Event
	err = harness.Poll(ctx, 30*time.Second, func(ctx context.Context) error {
		log, err := testNode.NodeExec(ctx, "cat", "/var/log/crishim/audit.log")
		if err != nil {
			return fmt.Errorf("%w: %s", err, log)
		}
		started, ended = nil, nil
		sc := bufio.NewScanner(bytes.NewReader(log))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var ev audit.Event
			if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Kind != audit.KindExec || ev.PodName != "sysnode-audit" || strings.Join(ev.Argv, " ") != "echo from-the-unit" {
				continue
			}
			switch ev.Stage {
			case audit.StageStarted:
				started = &ev
			case audit.StageEnded:
				ended = &ev
			}
		}
		if started == nil || ended == nil {
			return fmt.Errorf("no started and ended exec events of the pod yet:\n%s", log)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ended.ID != started.ID {
		t.Errorf("started event %s and ended event %s of one exec", started.ID, ended.ID)
	}
	if ended.ExitCode == nil || *ended.ExitCode != 0 {
		t.Errorf("ended event exit code %v, want 0", ended.ExitCode)
	}
	if !strings.HasPrefix(ended.Recording, "/var/log/crishim/sessions/") {
		t.Fatalf("ended event's recording %q, want one in /var/log/crishim/sessions", ended.Recording)
	}
	cast, err := testNode.NodeExec(ctx, "cat", ended.Recording)
	if err != nil || !strings.Contains(string(cast), "from-the-unit") {
		t.Errorf("recording %s: %v\n%s", ended.Recording, err, cast)
	}
	for p, mode := range map[string]string{
		"/run/crishim":               "750",
		"/var/log/crishim":           "700",
		"/var/log/crishim/sessions":  "700",
		"/var/log/crishim/audit.log": "600",
		ended.Recording:              "600",
	} {
		if out, err := testNode.NodeExec(ctx, "stat", "-c", "%a", p); err != nil || strings.TrimSpace(string(out)) != mode {
			t.Errorf("%s: mode %s (%v), want %s", p, bytes.TrimSpace(out), err, mode)
		}
	}
	// Nothing went wrong writing them inside the sandbox.
	m := metrics(ctx, t)
	for _, name := range []string{"crishim_audit_errors_total", "crishim_record_errors_total"} {
		for _, l := range strings.Split(grepLines(m, name), "\n") {
			if strings.HasPrefix(l, name) && !strings.HasSuffix(l, " 0") {
				t.Errorf("%s", l)
			}
		}
	}
}
