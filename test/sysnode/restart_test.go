package sysnode

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	remote "k8s.io/cri-client/pkg"

	"github.com/crishim/crishim/test/harness"
)

// The version the restart test upgrades to: after TestDebUpgrade's (node_test.go runs
// first), so Debian orders it newer.
const restartUpgradeVersion = "0.0.1~sysnode3"

// hammer calls crishim's socket in a loop from a few goroutines with the kubelet's own
// CRI client, counting the failed calls and the longest one.
type hammer struct {
	calls, failed atomic.Int64
	mu            sync.Mutex
	longest       time.Duration
	errs          []string
}

func (h *hammer) run(ctx context.Context, t *testing.T, goroutines int) (stop func()) {
	t.Helper()
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(testNode.CrishimEndpoint()).WithConnectionTimeout(time.Minute).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	calls := []func(context.Context) error{
		func(ctx context.Context) error { _, err := rs.Version(ctx, ""); return err },
		func(ctx context.Context) error { _, err := rs.Status(ctx, false); return err },
		func(ctx context.Context) error { _, err := rs.ListContainers(ctx, nil); return err },
	}
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; ctx.Err() == nil; i++ {
				start := time.Now()
				err := calls[i%len(calls)](ctx)
				took := time.Since(start)
				if ctx.Err() != nil {
					return // stopped: a call cut short by the test is not the socket's failure
				}
				h.calls.Add(1)
				h.mu.Lock()
				h.longest = max(h.longest, took)
				if err != nil {
					h.failed.Add(1)
					if len(h.errs) < 10 {
						h.errs = append(h.errs, err.Error())
					}
				}
				h.mu.Unlock()
			}
		}()
	}
	return func() {
		cancel()
		wg.Wait()
		_ = rs.Close(context.Background())
	}
}

// takeLongest returns the longest call since the last take, and starts over.
func (h *hammer) takeLongest() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.longest
	h.longest = 0
	return l
}

// waitCalls waits until the hammer has made n more calls, so each restart happens under
// load and the calls after it are counted.
func (h *hammer) waitCalls(ctx context.Context, n int64) error {
	want := h.calls.Load() + n
	return harness.Poll(ctx, time.Minute, func(context.Context) error {
		if got := h.calls.Load(); got < want {
			return fmt.Errorf("the hammer made %d calls, waiting for %d", got, want)
		}
		return nil
	})
}

var kubeletMetricLine = regexp.MustCompile(`(?m)^(kubelet_runtime_operations(?:_errors)?_total\{[^}]*\}) (\S+)$`)

// kubeletRuntimeOps scrapes the kubelet's /metrics through the API server's node proxy:
// its runtime operations and their errors, by series.
func kubeletRuntimeOps(ctx context.Context, t *testing.T) map[string]float64 {
	t.Helper()
	out, err := testNode.Kubectl(ctx, nil, "get", "--raw", "/api/v1/nodes/"+testNode.Name+"/proxy/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]float64{}
	for _, sm := range kubeletMetricLine.FindAllStringSubmatch(string(out), -1) {
		v, err := strconv.ParseFloat(sm[2], 64)
		if err != nil {
			t.Fatalf("%s: %v", sm[0], err)
		}
		m[sm[1]] = v
	}
	return m
}

// newErrors lists the kubelet's runtime operation errors counted after before.
func newErrors(before, after map[string]float64) []string {
	var grew []string
	for k, v := range after {
		if strings.HasPrefix(k, "kubelet_runtime_operations_errors_total") && v > before[k] {
			grew = append(grew, fmt.Sprintf("%s %v -> %v", k, before[k], v))
		}
	}
	return grew
}

const execSyncOps = `kubelet_runtime_operations_total{operation_type="exec_sync"}`

// TestRestartsAndUpgradeRefuseNoCall (issue 33 item 2): with a pod running under an exec
// probe and a CRI client hammering crishim's socket, 20 × `systemctl restart crishim` and
// an upgrade by installing a newer package fail no call of the hammer and count no
// runtime operation error in the kubelet; the pod keeps its container. The longest call
// across a restart is printed (no threshold: it is a measure, not a contract).
func TestRestartsAndUpgradeRefuseNoCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	deb, err := buildDeb(ctx, restartUpgradeVersion)
	if err != nil {
		t.Fatal(err)
	}
	// The earlier tests' pods go first: their teardown is not this test's to count.
	if _, err := testNode.Kubectl(ctx, nil, "wait", "--for=delete", "pod/sysnode-pod", "pod/sysnode-upgrade", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
	// An exec probe: the kubelet's own CRI calls go on through the restarts. Its timeout is
	// the runtime's (containerd fails an ExecSync whose command outlives it, counted as an
	// exec_sync error): 10 s, so a runc exec slowed by a loaded machine is not taken for a
	// call crishim refused, while a call refused still counts.
	startPod(ctx, t, "sysnode-restart", sleepPod("sysnode-restart")+`    readinessProbe:
      exec:
        command: ["true"]
      periodSeconds: 1
      timeoutSeconds: 10
`)
	beforeID := containerState(ctx, t, "sysnode-restart")
	before := kubeletRuntimeOps(ctx, t)
	if before[execSyncOps] == 0 {
		t.Fatalf("the kubelet counts no exec_sync (the probe): %v", before)
	}

	var h hammer
	stop := h.run(ctx, t, 4)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	if err := h.waitCalls(ctx, 50); err != nil {
		t.Fatal(err)
	}
	h.takeLongest()
	const restarts = 20
	var longestRestart time.Duration
	for i := range restarts {
		if _, err := testNode.NodeExec(ctx, "systemctl", "restart", "crishim"); err != nil {
			t.Fatalf("restart %d: %v", i+1, err)
		}
		if err := h.waitCalls(ctx, 50); err != nil {
			t.Fatalf("after restart %d: %v", i+1, err)
		}
		longestRestart = max(longestRestart, h.takeLongest())
	}
	if err := testNode.InstallDeb(ctx, deb); err != nil {
		t.Fatal(err)
	}
	if out, err := testNode.NodeExec(ctx, "dpkg-query", "-W", "-f", "${Version}", "crishim"); err != nil || string(out) != restartUpgradeVersion {
		t.Fatalf("installed version %q (%v), want %s", out, err, restartUpgradeVersion)
	}
	if err := h.waitCalls(ctx, 50); err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}
	longestUpgrade := h.takeLongest()
	stop()
	stopped = true
	out, err := testNode.NodeExec(ctx, "journalctl", "--no-pager", "-u", "crishim", "-g", "crishim serving")
	if err != nil || !strings.Contains(string(out), "version="+restartUpgradeVersion) {
		t.Errorf("the upgraded crishim does not serve (%v):\n%s", err, out)
	}
	// The kubelet's probes went on through the restarts: wait for a few more after them,
	// so a call of the kubelet cut by the last restart has been counted.
	var after map[string]float64
	err = harness.Poll(ctx, time.Minute, func(ctx context.Context) error {
		after = kubeletRuntimeOps(ctx, t)
		if after[execSyncOps] < before[execSyncOps]+restarts+3 {
			return fmt.Errorf("the kubelet's exec_sync went from %v to %v", before[execSyncOps], after[execSyncOps])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Logf("hammer: %d calls across %d restarts and an upgrade, %d failed; longest call across a restart %s, across the upgrade %s",
		h.calls.Load(), restarts, h.failed.Load(), longestRestart.Round(time.Millisecond), longestUpgrade.Round(time.Millisecond))
	fmt.Printf("sysnode: longest CRI call across a `systemctl restart crishim`: %s (%d restarts), across the .deb upgrade: %s\n",
		longestRestart.Round(time.Millisecond), restarts, longestUpgrade.Round(time.Millisecond))
	if n := h.failed.Load(); n != 0 {
		t.Errorf("%d of the hammer's %d calls failed, first: %q", n, h.calls.Load(), h.errs)
	}
	if grew := newErrors(before, after); len(grew) != 0 {
		// The kubelet's log says what each failed call got, to tell a refused call from a
		// slow runtime.
		logs, _ := testNode.NodeExec(ctx, "journalctl", "--no-pager", "-u", "kubelet", "-g", "rpc error|ExecSync|ListPodSandbox", "-n", "20")
		t.Errorf("the kubelet counted runtime operation errors:\n%s\nits log:\n%s", strings.Join(grew, "\n"), logs)
	}
	if afterID := containerState(ctx, t, "sysnode-restart"); afterID != beforeID {
		t.Errorf("the pod's container (ID, restarts) went from %q to %q", beforeID, afterID)
	}
}

// TestKubeletBeforeCrishim (issue 33 item 2): a kubelet started while crishim.service is
// stopped finds crishim.socket listening, and its first call starts crishim (socket
// activation): it runs a pod without systemd restarting it (its NRestarts and MainPID
// stay). --job-mode=ignore-dependencies keeps systemd from starting crishim first for the
// drop-in's Wants=/After=: a boot whose kubelet is not ordered after crishim.
func TestKubeletBeforeCrishim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	show := func() string {
		out, err := testNode.NodeExec(ctx, "systemctl", "show", "-p", "NRestarts", "-p", "MainPID", "kubelet")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(string(out)), " ")
	}
	if _, err := testNode.NodeExec(ctx, "sh", "-c", `set -e
systemctl stop kubelet
systemctl stop crishim.service
test "$(systemctl is-active crishim.socket)" = active
test "$(systemctl is-active crishim.service)" = inactive
systemctl start --job-mode=ignore-dependencies kubelet`); err != nil {
		t.Fatal(err)
	}
	started := show()
	if err := testNode.WaitReady(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	startPod(ctx, t, "sysnode-first", sleepPod("sysnode-first"))
	if got := show(); got != started {
		t.Errorf("the kubelet was restarted: %s, then %s", started, got)
	}
	if out, err := testNode.NodeExec(ctx, "systemctl", "is-active", "crishim.service"); err != nil {
		t.Errorf("crishim.service not started by the socket: %v %s", err, out)
	}
	monotonic := func(unit, prop string) int64 {
		out, err := testNode.NodeExec(ctx, "systemctl", "show", "--value", "-p", prop, unit)
		if err != nil {
			t.Fatal(err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			t.Fatalf("%s %s: %v", unit, prop, err)
		}
		return v
	}
	kubelet, crishim := monotonic("kubelet", "ExecMainStartTimestampMonotonic"), monotonic("crishim", "ExecMainStartTimestampMonotonic")
	if crishim <= kubelet {
		t.Errorf("crishim started (%d µs) before the kubelet (%d µs): not the case under test", crishim, kubelet)
	}
}
