package kube

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/test/crictl"
)

// operatorLoginUID is the login uid of the operator the test plays.
const operatorLoginUID = 4242

// TestWhoCalledOnTheNode: with an audit log, the node's crishim audits the
// CRI calls of callers other than the kubelet. The kubelet's own calls
// (running a pod) are not audited, and its exec session (kubectl exec)
// names the kubelet as its caller; an operator's `crictl stop` and `crictl
// rm` of the pod's container, by hand on the node, are criCall events
// naming the operator's login uid, crictl, the pod and the container's full
// ID. crishim_cri_calls_by_caller_total counts the kubelet's calls and the
// operator's apart.
func TestWhoCalledOnTheNode(t *testing.T) {
	if _, err := os.Stat("/proc/self/loginuid"); err != nil {
		t.Skipf("no /proc/self/loginuid (a kernel without audit): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var bin string
	var buildErr error
	var built sync.WaitGroup
	built.Go(func() { bin, buildErr = crictl.Build(ctx) })

	path := filepath.Join(t.TempDir(), "audit.log")
	if err := testNode.RestartCrishim(ctx, false, "--audit-log", path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := testNode.RestartCrishim(ctx, false); err != nil {
			t.Errorf("restart crishim as it was: %v", err)
		}
		if err := testNode.WaitReady(ctx, time.Minute); err != nil {
			t.Errorf("node not Ready after crishim's restart: %v", err)
		}
	})
	if err := testNode.WaitReady(ctx, time.Minute); err != nil {
		t.Fatalf("node not Ready after crishim's restart: %v", err)
	}

	pod := uniqueName("who")
	apply(t, podManifest(pod, "", "", "app", "exec sleep 3600"))
	t.Cleanup(func() { kubectl(t, "delete", "pod", pod, "--wait=false") })
	waitReady(t, pod)
	if out, errOut, code := kubectlEnv(t, nil, "", "exec", pod, "-c", "app", "--", "echo", "from-kubectl"); code != 0 || out != "from-kubectl\n" {
		t.Fatalf("kubectl exec: exit %d %q %s", code, out, errOut)
	}
	ctrID := getPod(t, pod).Status.ContainerStatuses[0].ContainerID
	ctrID = ctrID[strings.Index(ctrID, "://")+3:]

	built.Wait()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	for _, args := range [][]string{{"stop", "--timeout", "0", ctrID[:12]}, {"rm", ctrID[:12]}} {
		if _, err := crictl.RunAsOperator(ctx, bin, operatorLoginUID, testNode.CrishimEndpoint(), args...); err != nil {
			t.Fatal(err)
		}
	}

	var evs []audit.Event
	eventually(t, time.Minute, func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if evs, err = audit.Decode(strings.NewReader(string(b))); err != nil {
			return err
		}
		if !slices.ContainsFunc(evs, func(ev audit.Event) bool { return ev.Kind == audit.KindExec && ev.Stage == audit.StageEnded }) ||
			!slices.ContainsFunc(evs, func(ev audit.Event) bool {
				return ev.Method == "/runtime.v1.RuntimeService/RemoveContainer" && ev.Stage == audit.StageEnded
			}) {
			return os.ErrNotExist
		}
		return nil
	})
	var execByKubelet, rmByOperator bool
	for _, ev := range evs {
		c := ev.Caller
		switch {
		case ev.Kind == audit.KindCRICall && (c.IsKubelet() || ev.PodName == pod && filepath.Base(c.Exe) != "crictl"):
			// Only the kubelet and crictl touched the pod.
			t.Errorf("a call of the kubelet's is audited: %+v, caller %+v", ev, c)
		case ev.Kind == audit.KindExec && slices.Contains(ev.Argv, "from-kubectl"):
			execByKubelet = c.IsKubelet() && filepath.Base(c.Exe) == "kubelet" && c.UID == 0 && ev.PodName == pod
			if !execByKubelet {
				t.Errorf("kubectl exec's session %+v, caller %+v: want the kubelet's", ev, c)
			}
		case ev.Kind == audit.KindCRICall && ev.Method == "/runtime.v1.RuntimeService/RemoveContainer" && ev.Stage == audit.StageEnded:
			rmByOperator = c != nil && c.LoginUID != nil && *c.LoginUID == operatorLoginUID && filepath.Base(c.Exe) == "crictl" &&
				slices.Contains(c.Cmdline, "rm") && ev.ContainerID == ctrID && ev.PodName == pod && ev.PodNamespace == "default" &&
				ev.ContainerName == "app" && ev.Code == "OK"
			if !rmByOperator {
				t.Errorf("crictl rm's event %+v, caller %+v: want the operator (login uid %d), container %s of pod %s", ev, c, operatorLoginUID, ctrID, pod)
			}
		}
	}
	if !execByKubelet || !rmByOperator {
		t.Errorf("missing events: kubectl exec's %v, crictl rm's %v", execByKubelet, rmByOperator)
	}
	for _, sample := range []string{
		`crishim_cri_calls_by_caller_total{caller="kubelet",code="OK",method="/runtime.v1.RuntimeService/CreateContainer"}`,
		`crishim_cri_calls_by_caller_total{caller="other",code="OK",method="/runtime.v1.RuntimeService/RemoveContainer"}`,
	} {
		if v := metric(t, sample); v < 1 {
			t.Errorf("%s = %v, want at least 1", sample, v)
		}
	}
	if t.Failed() {
		b, _ := os.ReadFile(path)
		t.Logf("audit log:\n%s", b)
	}
}
