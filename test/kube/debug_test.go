package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestKubectlDebugTarget: `kubectl debug -i POD --target=app` starts an ephemeral container
// in the app's PID namespace through crishim, natively and with crishim emulating TARGET,
// and a target that cannot be joined is refused with crishim's reason in the ephemeral
// container's status.
func TestKubectlDebugTarget(t *testing.T) {
	for _, mode := range []string{"native", "emulate"} {
		t.Run(mode, func(t *testing.T) {
			if mode != "native" {
				restartCrishim(t, "--pid-target-mode="+mode)
			}
			pod := uniqueName("debug-" + mode)
			apply(t, podManifest(pod, "", "", "app", "exec sleep 3601"))
			waitReady(t, pod)
			out, errOut, code := kubectlEnv(t, nil, "ps\nexit\n", "debug", "-i", pod,
				"--image="+busybox, "--image-pull-policy=IfNotPresent", "--target=app", "--container=dbg", "--", "sh")
			if code != 0 || !strings.Contains(out, "sleep 3601") {
				t.Errorf("kubectl debug --target=app: exit %d; ps does not show the app's sleep 3601\nstdout: %s\nstderr: %s", code, out, errOut)
			}
		})
	}

	t.Run("not running target", func(t *testing.T) {
		pod := uniqueName("debug-bad")
		apply(t, podManifest(pod, "", "  restartPolicy: Never\n", "done", "exit 0", "app", "exec sleep 3600"))
		eventually(t, 2*time.Minute, func() error {
			for _, s := range getPod(t, pod).Status.ContainerStatuses {
				if s.Name == "done" && s.State.Terminated != nil {
					return nil
				}
			}
			return fmt.Errorf("container done has not exited yet")
		})
		kubectl(t, "debug", pod, "--image="+busybox, "--image-pull-policy=IfNotPresent", "--target=done", "--container=bad", "--", "ps")
		eventually(t, 2*time.Minute, func() error {
			p := getPod(t, pod)
			for _, s := range p.Status.EphemeralContainerStatuses {
				if s.Name != "bad" {
					continue
				}
				if w := s.State.Waiting; w != nil && strings.Contains(w.Message, "not running: it has no PID namespace to join") {
					return nil
				}
				if s.State.Running != nil || s.State.Terminated != nil {
					return fmt.Errorf("debug container targeting a finished container started: %+v", s.State)
				}
				return fmt.Errorf("ephemeral container bad: %+v", s.State)
			}
			return fmt.Errorf("no status for ephemeral container bad yet")
		})
	})
}

// restartCrishim restarts the node's crishim with extra flags, and with the defaults again
// when the test ends.
func restartCrishim(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := testNode.RestartCrishim(ctx, false, args...); err != nil {
		t.Fatalf("restart crishim %v: %v", args, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := testNode.RestartCrishim(ctx, false); err != nil {
			t.Errorf("restart crishim with defaults: %v", err)
		}
	})
}
