package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crishim/crishim/test/harness"
)

// TestKubectlDebugTarget: `kubectl debug -i POD --target=app` starts an ephemeral container
// in the app's PID namespace through crishim, natively and with crishim emulating TARGET,
// and a target that cannot be joined is refused with crishim's reason in the ephemeral
// container's status.
func TestKubectlDebugTarget(t *testing.T) {
	for _, mode := range []string{"native", "emulate"} {
		t.Run(mode, func(t *testing.T) {
			if mode != "native" {
				if testNode.Runtime == harness.RuntimeCRIO {
					t.Skipf("emulating TARGET needs the containerd API, which CRI-O does not have")
				}
				restartCrishim(t, "--pid-target-mode="+mode)
			}
			sample := fmt.Sprintf(`crishim_pid_target_requests_total{call="start",code="OK",mode=%q}`, mode)
			starts := metricGrowth(t, sample)
			pod := uniqueName("debug-" + mode)
			apply(t, podManifest(pod, "", "", "app", "exec sleep 3601"))
			waitReady(t, pod)
			out, err := testNode.KubectlInteract(context.Background(), "sleep 3601", "ps", "debug", "-i", pod,
				"--image="+busybox, "--image-pull-policy=IfNotPresent", "--target=app", "--container=dbg", "--", "sh")
			if err != nil {
				t.Errorf("kubectl debug -i --target=app, typing ps: %v\n%s", err, out)
			}
			if d := starts(); d != 1 {
				t.Errorf("%s grew by %v, want 1: the debug container was not started through crishim in %s mode", sample, d, mode)
			}
		})
	}

	t.Run("image not on the allowlist", func(t *testing.T) {
		restartCrishim(t, "--debug-image-allowlist=registry.example/allowed/*")
		pod := uniqueName("debug-deny")
		apply(t, podManifest(pod, "", "", "app", "exec sleep 3600"))
		waitReady(t, pod)
		kubectl(t, "debug", pod, "--image="+busybox, "--image-pull-policy=IfNotPresent", "--target=app", "--container=denied", "--", "ps")
		waitEphemeralRefused(t, pod, "denied", "--debug-image-allowlist", "busybox")
	})

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

// TestKubectlDebugWithoutTarget: `kubectl debug` without --target makes an ephemeral
// container all the same, and crishim judges it as a debug container by the pod's spec in the
// API server: an image off the allowlist is refused with the reason in the ephemeral
// container's status, an allowed one runs, and the pod's regular containers are not judged.
func TestKubectlDebugWithoutTarget(t *testing.T) {
	t.Run("image not on the allowlist", func(t *testing.T) {
		restartCrishim(t, "--debug-image-allowlist=registry.example/allowed/*")
		regular := metricGrowth(t, `crishim_debug_container_lookups_total{result="regular"}`)
		pod := uniqueName("debug-notarget-deny")
		// The app container's image is off the allowlist too: a regular container, not judged.
		apply(t, podManifest(pod, "", "", "app", "exec sleep 3600"))
		waitReady(t, pod)
		if d := regular(); d < 1 {
			t.Errorf("regular container lookups grew by %v, want at least 1 (the app container)", d)
		}
		kubectl(t, "debug", pod, "--image="+busybox, "--image-pull-policy=IfNotPresent", "--container=denied", "--", "ps")
		waitEphemeralRefused(t, pod, "denied", "--debug-image-allowlist", "not allowed for debug containers", "busybox")
	})

	t.Run("image on the allowlist", func(t *testing.T) {
		restartCrishim(t, "--debug-image-allowlist=docker.io/library/busybox")
		pod := uniqueName("debug-notarget-allow")
		apply(t, podManifest(pod, "", "", "app", "exec sleep 3601"))
		waitReady(t, pod)
		ephemeral := metricGrowth(t, `crishim_debug_container_lookups_total{result="ephemeral"}`)
		allowed := metricGrowth(t, `crishim_debug_image_checks_total{result="allowed"}`)
		out, err := testNode.KubectlInteract(context.Background(), "hello-42", "echo hello-$((6*7))", "debug", "-i", pod,
			"--image="+busybox, "--image-pull-policy=IfNotPresent", "--container=dbg", "--", "sh")
		if err != nil {
			t.Errorf("kubectl debug -i without --target, typing echo: %v\n%s", err, out)
		}
		if e, a := ephemeral(), allowed(); e != 1 || a != 1 {
			t.Errorf("ephemeral lookups grew by %v and allowed images by %v, want 1 and 1: the debug container was not judged", e, a)
		}
	})
}

// waitEphemeralRefused waits until the pod's ephemeral container name is
// Waiting with a message that holds every one of want: the kubelet's report
// of crishim's refusal. One that runs or ends is reported until the wait
// gives up.
func waitEphemeralRefused(t *testing.T, pod, name string, want ...string) {
	t.Helper()
	eventually(t, 2*time.Minute, func() error {
		for _, s := range getPod(t, pod).Status.EphemeralContainerStatuses {
			if s.Name != name {
				continue
			}
			if w := s.State.Waiting; w != nil && containsEvery(w.Message, want) {
				return nil
			}
			if s.State.Running != nil || s.State.Terminated != nil {
				return fmt.Errorf("ephemeral container %s with a refused image started: %+v", name, s.State)
			}
			return fmt.Errorf("ephemeral container %s: %+v", name, s.State)
		}
		return fmt.Errorf("no status for ephemeral container %s yet", name)
	})
}

func containsEvery(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
