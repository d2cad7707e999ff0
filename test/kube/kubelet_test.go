package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crishim/crishim/test/harness"
)

// statusCalls counts the kubelet's runtime health checks (every few seconds) that crishim
// served; nothing else on the node calls Status.
const statusCalls = `crishim_grpc_requests_total{code="OK",method="/runtime.v1.RuntimeService/Status"}`

// TestKubeletAsInstalled: the node's kubelet, started from kubeadm's unit files with
// crishim's kubelet files installed as docs/install.md says (test/node), talks to crishim:
// its effective configuration names crishim's socket, crishim serves its calls, and the node
// is Ready. With an old kubeadm's --container-runtime-endpoint in kubeadm-flags.env, crishim's
// check refuses to start the kubelet, naming the flag, and the fix the docs give brings it
// back.
func TestKubeletAsInstalled(t *testing.T) {
	kubeletTalksToCrishim(t)

	t.Run("endpoint flag refused", func(t *testing.T) {
		flags := testNode.KubeletHostPath("/var/lib/kubelet/kubeadm-flags.env")
		orig, err := os.ReadFile(flags)
		if err != nil {
			t.Fatal(err)
		}
		fixed := false
		t.Cleanup(func() { // whatever failed, leave the kubelet running for the other tests
			if !fixed {
				if err := os.WriteFile(flags, orig, 0o644); err != nil {
					t.Error(err)
				}
				restartKubelet(t)
			}
		})
		old := strings.Replace(string(orig), `KUBELET_KUBEADM_ARGS="`, `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock `, 1)
		if err := os.WriteFile(flags, []byte(old), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		err = testNode.RestartKubelet(ctx)
		if want := "the kubelet flag --container-runtime-endpoint=unix:///var/run/containerd/containerd.sock overrides"; err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("kubelet started with the old kubeadm flag: %v; want the refusal %q", err, want)
		}
		// The docs' fix: sed -i 's| *--container-runtime-endpoint=[^ "]*||' kubeadm-flags.env.
		if err := os.WriteFile(flags, orig, 0o644); err != nil {
			t.Fatal(err)
		}
		restartKubelet(t)
		fixed = true
		kubeletTalksToCrishim(t)
	})
}

// kubeletTalksToCrishim checks the kubelet's effective containerRuntimeEndpoint and
// imageServiceEndpoint, then that crishim serves its calls, then that the node is Ready.
func kubeletTalksToCrishim(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// What docs/install.md has the operator check: kubectl get --raw .../proxy/configz.
	raw, err := testNode.Clientset.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", testNode.Name, "proxy", "configz").DoRaw(ctx)
	if err != nil {
		t.Fatalf("kubelet configz: %v", err)
	}
	var configz struct {
		KubeletConfig struct {
			ContainerRuntimeEndpoint string `json:"containerRuntimeEndpoint"`
			ImageServiceEndpoint     string `json:"imageServiceEndpoint"`
		} `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &configz); err != nil {
		t.Fatalf("kubelet configz: %v: %s", err, raw)
	}
	if c := configz.KubeletConfig; c.ContainerRuntimeEndpoint != testNode.CrishimEndpoint() || c.ImageServiceEndpoint != testNode.CrishimEndpoint() {
		t.Errorf("kubelet's endpoints: runtime %s, image %s; want crishim's %s", c.ContainerRuntimeEndpoint, c.ImageServiceEndpoint, testNode.CrishimEndpoint())
	}
	calls := metricGrowth(t, statusCalls)
	eventually(t, time.Minute, func() error {
		if calls() < 2 {
			return fmt.Errorf("crishim served %v of the kubelet's Status calls so far", calls())
		}
		return nil
	})
	if err := testNode.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
}

func restartKubelet(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := testNode.RestartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
}

// runtimeCalls is crishim's count of the RuntimeService calls of method that ended with code.
func runtimeCalls(code, method string) string {
	return fmt.Sprintf(`crishim_grpc_requests_total{code=%q,method="/runtime.v1.RuntimeService/%s"}`, code, method)
}

// TestKubeletListsByStreamingThroughCrishim: with CRIListStreaming the kubelet lists pods and
// containers with the server-streaming Stream* calls (KEP-5825). crishim relays them: where
// the runtime has them (containerd 2.4) the kubelet's relists keep using them through
// crishim; where it has not (CRI-O 1.34, containerd 1.6) the kubelet gets the runtime's own
// Unimplemented through crishim once (its client then turns streaming off for good) and
// lists with the unary calls, as it would talking to the runtime directly.
func TestKubeletListsByStreamingThroughCrishim(t *testing.T) {
	grows := func(sample, why string) {
		t.Helper()
		grew := metricGrowth(t, sample)
		eventually(t, 2*time.Minute, func() error {
			if d := grew(); d < 1 {
				return fmt.Errorf("%s grew by %v: %s", sample, d, why)
			}
			return nil
		})
	}
	if testNode.Runtime == harness.RuntimeContainerd {
		for _, method := range []string{"StreamPodSandboxes", "StreamContainers"} {
			grows(runtimeCalls("OK", method), "the kubelet's relists did not stream through crishim")
		}
		return
	}
	// A kubelet started afresh tries streaming once; crishim may have been restarted since
	// this kubelet's client turned it off.
	pods := metricGrowth(t, runtimeCalls("Unimplemented", "StreamPodSandboxes"))
	containers := metricGrowth(t, runtimeCalls("Unimplemented", "StreamContainers"))
	restartKubelet(t)
	eventually(t, 2*time.Minute, func() error {
		if pods()+containers() < 1 {
			return fmt.Errorf("no Stream* call reached %s through crishim and came back Unimplemented", testNode.Runtime)
		}
		return nil
	})
	grows(runtimeCalls("OK", "ListContainers"), "the kubelet did not fall back to the unary lists")
}

// TestInPlaceResizeThroughCrishim: an in-place resize (the pod's resize subresource) makes
// the kubelet call UpdateContainerResources and UpdatePodSandboxResources, relayed by
// crishim: containerd 2.4 and CRI-O 1.34 take the sandbox call, containerd 1.6's
// Unimplemented reaches the kubelet through crishim as it would directly, and the resize
// is applied on every runtime.
func TestInPlaceResizeThroughCrishim(t *testing.T) {
	sandboxCode := "OK"
	if testNode.Runtime == harness.RuntimeContainerd16 {
		sandboxCode = "Unimplemented"
	}
	containerCalls := metricGrowth(t, runtimeCalls("OK", "UpdateContainerResources"))
	sandboxCalls := metricGrowth(t, runtimeCalls(sandboxCode, "UpdatePodSandboxResources"))
	pod := uniqueName("resize")
	apply(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  containers:
  - name: app
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
    resources:
      requests: {cpu: 100m, memory: 32Mi}
      limits: {cpu: 200m, memory: 64Mi}
`, pod, busybox))
	waitReady(t, pod)
	kubectl(t, "patch", "pod", pod, "--subresource", "resize", "--patch",
		`{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"150m"},"limits":{"cpu":"300m"}}}]}}`)
	eventually(t, 2*time.Minute, func() error {
		for _, s := range getPod(t, pod).Status.ContainerStatuses {
			if r := s.Resources; r != nil && r.Limits.Cpu().MilliValue() == 300 {
				return nil
			}
		}
		return fmt.Errorf("the resize to a 300m CPU limit is not in the pod's status yet")
	})
	if d := containerCalls(); d < 1 {
		t.Errorf("UpdateContainerResources through crishim grew by %v, want at least 1", d)
	}
	if d := sandboxCalls(); d < 1 {
		t.Errorf("%s grew by %v, want at least 1", runtimeCalls(sandboxCode, "UpdatePodSandboxResources"), d)
	}
}
