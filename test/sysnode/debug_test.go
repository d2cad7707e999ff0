package sysnode

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/crishim/crishim/test/node"
)

// pidTargetStarts is crishim's count of debug containers started in a target's PID
// namespace natively (containerd joins it).
var pidTargetStarts = regexp.MustCompile(`(?m)^crishim_pid_target_requests_total\{call="start",code="OK",mode="native"\} (\d+)`)

func pidTargetStartCount(ctx context.Context, t *testing.T) int {
	t.Helper()
	m := pidTargetStarts.FindStringSubmatch(metrics(ctx, t))
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKubectlDebugTarget: `kubectl debug -i POD --target=app` on the systemd node starts an
// ephemeral container through crishim in the app's PID namespace: `ps` in it sees the app's
// process, and crishim counts the start.
func TestKubectlDebugTarget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runPod(ctx, t, "sysnode-debug", busyboxPod("sysnode-debug", "app", `["sh", "-c", "exec sleep 3601"]`))
	before := pidTargetStartCount(ctx, t)
	out, err := testNode.KubectlInteract(ctx, "sleep 3601", "ps", "debug", "-i", "sysnode-debug",
		"--image="+node.BusyboxLatest, "--image-pull-policy=IfNotPresent", "--target=app", "--container=dbg", "--", "sh")
	if err != nil {
		t.Fatalf("kubectl debug -i --target=app, typing ps: %v\n%s", err, out)
	}
	if d := pidTargetStartCount(ctx, t) - before; d != 1 {
		t.Errorf("crishim's native PID-target starts grew by %d, want 1: the debug container was not started through crishim", d)
	}
}
