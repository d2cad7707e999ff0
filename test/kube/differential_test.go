package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/crishim/crishim/test/harness"
)

// TestKubeletDirectVersusCrishim runs one scenario twice, with the kubelet pointed straight
// at containerd and pointed at crishim, and requires the same pod and container states. The
// same pass shows stop signals: a pod with lifecycle.stopSignal SIGUSR1 gets SIGUSR1
// through crishim whatever the runtime, and directly only from a runtime that honours CRI
// stop_signal (containerd 2.4 does, containerd 1.6 ignores it and sends SIGTERM).
func TestKubeletDirectVersusCrishim(t *testing.T) {
	direct := "USR1"
	if testNode.Runtime == harness.RuntimeContainerd16 {
		direct = "TERM"
	}
	runs := []struct {
		name       string
		endpoint   string
		stopSignal string
	}{
		{"direct", testNode.ContainerdEndpoint(), direct},
		{"crishim", testNode.CrishimEndpoint(), "USR1"},
	}
	states := map[string][]string{}
	for _, run := range runs {
		t.Run(run.name, func(t *testing.T) {
			pointKubelet(t, run.endpoint)
			states[run.name] = scenario(t, run.name)
			if got := stopSignalSeen(t, run.name); got != run.stopSignal {
				t.Errorf("kubelet -> %s: the container with stopSignal SIGUSR1 got %s on delete, want %s", run.name, got, run.stopSignal)
			}
		})
	}
	// Leave the kubelet on crishim for the other tests whatever happened above.
	pointKubelet(t, testNode.CrishimEndpoint())
	if d, c := states["direct"], states["crishim"]; len(d) == 0 || !reflect.DeepEqual(d, c) {
		t.Errorf("pod states differ:\ndirect:\n  %s\ncrishim:\n  %s", strings.Join(d, "\n  "), strings.Join(c, "\n  "))
	}
}

func pointKubelet(t *testing.T, endpoint string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := testNode.PointKubelet(ctx, endpoint); err != nil {
		t.Fatal(err)
	}
}

// scenario runs pods whose containers end in every way a kubelet tells apart (init
// container done, running, exited non-zero, exited zero, missing image) and returns their
// settled states, names and IDs left out.
func scenario(t *testing.T, run string) []string {
	pod := "diff-" + run + "-" + fmt.Sprint(os.Getpid()%10000)
	apply(t, podManifest(pod, "", `  restartPolicy: Never
  initContainers:
  - name: init
    image: `+busybox+`
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo init done"]
`, "runs", "exec sleep 3600", "fails", "sleep 1; exit 3", "succeeds", "sleep 1; exit 0"))
	missing := pod + "-missing"
	apply(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  containers:
  - name: app
    image: docker.io/library/busybox:crishim-never-built
    imagePullPolicy: Never
`, missing))
	var out []string
	eventually(t, 2*time.Minute, func() error {
		p, m := getPod(t, pod), getPod(t, missing)
		out = append(describe(p), describe(m)...)
		settled := 0
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == "runs" && s.Ready || s.State.Terminated != nil {
				settled++
			}
		}
		if settled != 3 || len(m.Status.ContainerStatuses) == 0 || m.Status.ContainerStatuses[0].State.Waiting == nil ||
			m.Status.ContainerStatuses[0].State.Waiting.Reason != "ErrImageNeverPull" {
			return fmt.Errorf("not settled yet:\n%s", strings.Join(out, "\n"))
		}
		return nil
	})
	return out
}

// describe reduces a pod to what must not depend on the runtime path.
func describe(p *corev1.Pod) []string {
	base := strings.Join(strings.Split(p.Name, "-")[2:], "-") // drop "diff-<run>"
	lines := []string{fmt.Sprintf("pod%s phase=%s", base, p.Status.Phase)}
	for _, c := range p.Status.Conditions {
		lines = append(lines, fmt.Sprintf("pod%s condition %s=%s %s", base, c.Type, c.Status, c.Reason))
	}
	all := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, s := range all {
		line := fmt.Sprintf("pod%s container %s ready=%v restarts=%d image=%s", base, s.Name, s.Ready, s.RestartCount, s.Image)
		switch {
		case s.State.Running != nil:
			line += " running"
		case s.State.Terminated != nil:
			line += fmt.Sprintf(" terminated exit=%d reason=%s", s.State.Terminated.ExitCode, s.State.Terminated.Reason)
		case s.State.Waiting != nil:
			line += " waiting reason=" + s.State.Waiting.Reason
		}
		lines = append(lines, line)
	}
	sort.Strings(lines)
	return lines
}

// stopSignalSeen deletes a pod whose container declares lifecycle.stopSignal SIGUSR1 and
// traps both signals into a host file, and returns the one it got.
func stopSignalSeen(t *testing.T, run string) string {
	dir := t.TempDir()
	pod := uniqueName("stopsig-" + run)
	trap := `trap "echo USR1 > /out/signal; exit 0" USR1; trap "echo TERM > /out/signal; exit 0" TERM; while :; do sleep 1 & wait $!; done`
	apply(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
spec:
  os:
    name: linux
  terminationGracePeriodSeconds: 20
  volumes:
  - name: out
    hostPath:
      path: %[2]s
  containers:
  - name: app
    image: %[3]s
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", %[4]q]
    volumeMounts:
    - name: out
      mountPath: /out
    lifecycle:
      stopSignal: SIGUSR1
`, pod, dir, busybox, trap))
	waitReady(t, pod)
	kubectl(t, "delete", "pod", pod, "--wait=true", "--timeout=60s")
	b, err := os.ReadFile(filepath.Join(dir, "signal"))
	if err != nil {
		t.Fatalf("the container recorded no signal: %v", err)
	}
	return strings.TrimSpace(string(b))
}
