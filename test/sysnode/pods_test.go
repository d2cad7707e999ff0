package sysnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/crishim/crishim/test/node"
)

// busyboxPod is the manifest of a pod of one busybox container, container, that runs
// command (a YAML flow sequence) and is killed a second after its delete.
func busyboxPod(name, container, command string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: %s
    image: %s
    imagePullPolicy: IfNotPresent
    command: %s
`, name, container, node.BusyboxLatest, command)
}

// sleepPod is the manifest of a busybox pod name whose container, main, sleeps.
func sleepPod(name string) string { return busyboxPod(name, "main", `["sleep", "3600"]`) }

// runPod applies a pod manifest, waits until the pod is Ready and deletes it when the test
// ends, waiting until it is gone: the tests after it (restarts, purge) start on a quiet node.
func runPod(ctx context.Context, t *testing.T, name, manifest string) {
	t.Helper()
	applyPod(ctx, t, name, manifest, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := testNode.Kubectl(ctx, nil, "delete", "pod", name, "--wait=true", "--timeout=90s", "--ignore-not-found"); err != nil {
			t.Errorf("delete pod %s: %v", name, err)
		}
	})
}

// startPod is runPod whose delete at the end does not wait: a later test that needs the
// pod gone waits for it itself.
func startPod(ctx context.Context, t *testing.T, name, manifest string) {
	t.Helper()
	applyPod(ctx, t, name, manifest, func() {
		_, _ = testNode.Kubectl(context.Background(), nil, "delete", "pod", name, "--wait=false")
	})
}

// applyPod applies a pod manifest, has remove delete it when the test ends, and waits
// until the pod is Ready.
func applyPod(ctx context.Context, t *testing.T, name, manifest string, remove func()) {
	t.Helper()
	if _, err := testNode.Kubectl(ctx, []byte(manifest), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	if _, err := testNode.Kubectl(ctx, nil, "wait", "--for=condition=Ready", "pod/"+name, "--timeout=120s"); err != nil {
		out, _ := testNode.Kubectl(ctx, nil, "describe", "pod", name)
		t.Fatalf("%v\n%s", err, out)
	}
}

// containerState is the ID and restart count of the pod's container: what must not change
// when crishim restarts under it.
func containerState(ctx context.Context, t *testing.T, pod string) string {
	t.Helper()
	out, err := testNode.Kubectl(ctx, nil, "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount}")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
