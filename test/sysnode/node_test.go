package sysnode

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/crishim/crishim/test/harness"
)

// metrics returns crishim's /metrics as the host scrapes it from the node.
func metrics(ctx context.Context, t *testing.T) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, testNode.CrishimMetrics+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestUnitsRunUnderSystemd: the node's systemd runs, and containerd, crishim.socket,
// crishim and the kubelet are its active units, crishim's from the package's unit files,
// and crishim serves the socket systemd passed it.
func TestUnitsRunUnderSystemd(t *testing.T) {
	ctx := context.Background()
	if got := testNode.SystemState(ctx); got != "running" {
		failed, _ := testNode.NodeExec(ctx, "systemctl", "--failed", "--no-legend")
		t.Fatalf("is-system-running = %q; failed units:\n%s", got, failed)
	}
	for _, unit := range []string{"containerd", "crishim.socket", "crishim", "kubelet"} {
		if out, err := testNode.NodeExec(ctx, "systemctl", "is-active", unit); err != nil {
			t.Errorf("%s: %v %s", unit, err, out)
		}
	}
	out, err := testNode.NodeExec(ctx, "systemctl", "show", "-p", "FragmentPath", "-p", "DropInPaths", "crishim", "kubelet")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FragmentPath=/lib/systemd/system/crishim.service", "/etc/systemd/system/kubelet.service.d/90-crishim.conf"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	}
	out, err = testNode.NodeExec(ctx, "journalctl", "--no-pager", "-u", "crishim", "-g", "serving the socket systemd passed")
	if err != nil || !strings.Contains(string(out), "listen=/run/crishim/crishim.sock") {
		t.Errorf("crishim does not serve crishim.socket's listener (%v):\n%s", err, out)
	}
}

// TestPodRunsThroughCrishim: a pod the kubelet starts goes through crishim (its metrics
// count the kubelet's RunPodSandbox) and `kubectl exec` reaches it.
func TestPodRunsThroughCrishim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	startPod(ctx, t, "sysnode-pod", sleepPod("sysnode-pod"))
	out, err := testNode.Kubectl(ctx, nil, "exec", "sysnode-pod", "--", "echo", "hello from the systemd node")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "hello from the systemd node" {
		t.Errorf("kubectl exec said %q", got)
	}
	m := metrics(ctx, t)
	want := regexp.MustCompile(`crishim_cri_calls_by_caller_total\{caller="kubelet",code="OK",method="/runtime.v1.RuntimeService/RunPodSandbox"\} [1-9]`)
	if !want.MatchString(m) {
		t.Errorf("crishim's metrics count no RunPodSandbox of the kubelet:\n%s", grepLines(m, "RunPodSandbox"))
	}
}

// TestJournalHasCrishimLogs: crishim logs to the journal, under its unit.
func TestJournalHasCrishimLogs(t *testing.T) {
	out, err := testNode.NodeExec(context.Background(), "journalctl", "--no-pager", "-u", "crishim")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "crishim serving") {
		t.Errorf("journalctl -u crishim has no %q:\n%s", "crishim serving", out)
	}
}

// TestSystemctlReloadAppliesConfig: `systemctl reload crishim` (the unit's ExecReload,
// SIGHUP) makes crishim read its edited config file: a reloadable key changes, the journal
// says so and the reload counter counts it.
func TestSystemctlReloadAppliesConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := testNode.NodeExec(ctx, "cat", "/etc/crishim/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	edited := string(cfg) + "debug-image-allowlist = \"registry.example/debug/*\"\n"
	if _, err := testNode.NodeExecStdin(ctx, []byte(edited), "sh", "-c", "cat > /etc/crishim/config.toml.new && mv /etc/crishim/config.toml.new /etc/crishim/config.toml && systemctl reload crishim"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = testNode.NodeExecStdin(context.Background(), cfg, "sh", "-c", "cat > /etc/crishim/config.toml && systemctl reload crishim")
	})
	err = harness.Poll(ctx, 30*time.Second, func(ctx context.Context) error {
		out, err := testNode.NodeExec(ctx, "journalctl", "--no-pager", "-u", "crishim", "-g", "configuration reloaded")
		if err != nil {
			return err
		}
		if !strings.Contains(string(out), "debug-image-allowlist") {
			return fmt.Errorf("no reload of debug-image-allowlist in the journal yet:\n%s", out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if m := metrics(ctx, t); !regexp.MustCompile(`crishim_config_reloads_total\{result="success"\} [1-9]`).MatchString(m) {
		t.Errorf("no successful reload counted:\n%s", grepLines(m, "reload"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestDebUpgrade: installing a newer package restarts crishim under systemd (the package's
// postinst) with the new version, and a running pod keeps its container and can still be
// exec'd into. (What the kubelet sees during the restart is the socket-activation work's.)
func TestDebUpgrade(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	deb, err := buildDeb(ctx, upgradeVersion)
	if err != nil {
		t.Fatal(err)
	}
	startPod(ctx, t, "sysnode-upgrade", sleepPod("sysnode-upgrade"))
	before := containerState(ctx, t, "sysnode-upgrade")
	if err := testNode.InstallDeb(ctx, deb); err != nil {
		t.Fatal(err)
	}
	out, err := testNode.NodeExec(ctx, "dpkg-query", "-W", "-f", "${Version}", "crishim")
	if err != nil || string(out) != upgradeVersion {
		t.Fatalf("installed version %q (%v), want %s", out, err, upgradeVersion)
	}
	err = harness.Poll(ctx, time.Minute, func(ctx context.Context) error {
		out, err := testNode.NodeExec(ctx, "journalctl", "--no-pager", "-u", "crishim", "-g", "crishim serving")
		if err != nil {
			return err
		}
		if !strings.Contains(string(out), "version="+upgradeVersion) {
			return fmt.Errorf("the new crishim does not serve yet:\n%s", out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := testNode.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	err = harness.Poll(ctx, time.Minute, func(ctx context.Context) error {
		_, err := testNode.Kubectl(ctx, nil, "exec", "sysnode-upgrade", "--", "true")
		return err
	})
	if err != nil {
		t.Fatalf("kubectl exec after the upgrade: %v", err)
	}
	if after := containerState(ctx, t, "sysnode-upgrade"); after != before {
		t.Errorf("the pod's container (ID, restarts) went from %q to %q across the upgrade", before, after)
	}
}
