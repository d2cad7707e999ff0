package kube

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// TestRestartsUnderARunningKubelet: killing crishim (SIGKILL, as a crash) and starting it
// again, and restarting containerd, under a running kubelet: the node stays or returns to
// Ready, no pod is restarted or recreated, and exec works again.
func TestRestartsUnderARunningKubelet(t *testing.T) {
	pod := uniqueName("survivor")
	apply(t, podManifest(pod, "", "", "app", "exec sleep 3600", "side", "exec sleep 3600"))
	waitReady(t, pod)
	before := podIdentity(t, pod)

	for _, tc := range []struct {
		name    string
		restart func(context.Context) error
	}{
		{"crishim killed", func(ctx context.Context) error { return testNode.RestartCrishim(ctx, true) }},
		{"containerd restarted", testNode.RestartContainerd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := tc.restart(ctx); err != nil {
				t.Fatal(err)
			}
			if err := testNode.WaitReady(ctx, time.Minute); err != nil {
				t.Fatalf("node not Ready after the restart: %v", err)
			}
			// Give the kubelet's pod workers time to notice anything they would act on: a
			// relist (1 s) and a pod sync (10 s) several times over.
			watch := time.Now().Add(30 * time.Second)
			for time.Now().Before(watch) {
				if got := podIdentity(t, pod); !reflect.DeepEqual(got, before) {
					t.Fatalf("the pod changed under the restart:\nbefore %v\nafter  %v", before, got)
				}
				time.Sleep(2 * time.Second)
			}
			if out, errOut, code := kubectlEnv(t, nil, "", "exec", pod, "-c", "app", "--", "echo", "still here"); code != 0 || out != "still here\n" {
				t.Errorf("kubectl exec after the restart: exit %d %q %s", code, out, errOut)
			}
		})
	}
}

// podIdentity is what a restart must not change: the pod's UID and phase, and each
// container's ID, restart count and readiness.
func podIdentity(t *testing.T, name string) []string {
	t.Helper()
	p := getPod(t, name)
	id := []string{string(p.UID), string(p.Status.Phase)}
	for _, s := range p.Status.ContainerStatuses {
		id = append(id, fmt.Sprintf("%s=%s restarts=%d ready=%v", s.Name, s.ContainerID, s.RestartCount, s.Ready))
	}
	return id
}
