package e2e

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/test/harness"
)

// TestCRIThroughCrishim walks the kubelet's CRI calls through crishim in
// front of the private containerd, with the kubelet's own client.
func TestCRIThroughCrishim(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	rs, is := criClients(t, d.Endpoint)
	ctx := context.Background()

	v, err := rs.Version(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if v.RuntimeName != testbed.RuntimeName || v.RuntimeVersion != testbed.RuntimeVersion || v.RuntimeApiVersion != "v1" {
		t.Errorf("Version = %v; want the runtime's own %s %s, API v1", v, testbed.RuntimeName, testbed.RuntimeVersion)
	}
	st, err := rs.Status(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet's two conditions; others may be false and are the runtime's business
	// (containerd 2.x on cgroup v1: ContainerdHasNoDeprecationWarnings).
	if err := harness.Ready(st.GetStatus()); err != nil {
		t.Error(err)
	}
	if len(st.Info) == 0 {
		t.Error("verbose Status has no info")
	}
	rc, err := rs.RuntimeConfig(ctx)
	if err != nil {
		// containerd 1.6 predates RuntimeConfig (2.x answers it): what matters is that the
		// runtime's own answer comes back, not one made up by crishim.
		if status.Code(err) != codes.Unimplemented {
			t.Errorf("RuntimeConfig: %v", err)
		}
	} else if rc.GetLinux() == nil {
		t.Errorf("RuntimeConfig = %v", rc)
	}

	// Pod sandbox with CNI networking.
	name := uniqueName("lifecycle")
	podCfg := podConfig(t, name, map[string]string{"app": "lifecycle", "run": name})
	podID := runPod(t, rs, podCfg)
	ps, err := rs.PodSandboxStatus(ctx, podID, true)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY {
		t.Errorf("pod state %v", ps.Status.State)
	}
	ip, err := netip.ParseAddr(ps.Status.GetNetwork().GetIp())
	if err != nil || !netip.MustParsePrefix(testbed.Subnet).Contains(ip) {
		t.Errorf("pod IP %q not in the test bed's subnet %s", ps.Status.GetNetwork().GetIp(), testbed.Subnet)
	}
	if len(ps.Info) == 0 {
		t.Error("verbose PodSandboxStatus has no info")
	}

	pods, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"run": name}})
	if err != nil || len(pods) != 1 || pods[0].Id != podID {
		t.Fatalf("ListPodSandbox by label = %v, %v", pods, err)
	}
	pods, err = rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{Id: podID, State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}})
	if err != nil || len(pods) != 0 {
		t.Fatalf("ListPodSandbox by id and NOTREADY = %v, %v", pods, err)
	}

	// Containers.
	ctrCfg := containerConfig("app", "echo started; exec sleep 3600", map[string]string{"role": "app", "run": name})
	ctrID := startContainer(t, rs, podID, podCfg, ctrCfg)
	ctrs, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{
		PodSandboxId:  podID,
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"role": "app"},
	})
	if err != nil || len(ctrs) != 1 || ctrs[0].Id != ctrID {
		t.Fatalf("ListContainers by pod, state and label = %v, %v", ctrs, err)
	}
	cs, err := rs.ContainerStatus(ctx, ctrID, true)
	if err != nil {
		t.Fatal(err)
	}
	if cs.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING || !strings.Contains(cs.Info["info"], `"pid"`) {
		t.Errorf("ContainerStatus = %v, info %v", cs.Status, cs.Info)
	}

	// ExecSync: stdout, stderr, exit code, timeout.
	stdout, stderr, err := rs.ExecSync(ctx, ctrID, []string{"sh", "-c", "echo out; echo err >&2"}, 10*time.Second)
	if err != nil || string(stdout) != "out\n" || string(stderr) != "err\n" {
		t.Errorf("ExecSync = %q, %q, %v", stdout, stderr, err)
	}
	_, _, err = rs.ExecSync(ctx, ctrID, []string{"sh", "-c", "exit 3"}, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "3") {
		t.Errorf("ExecSync exit 3: %v", err)
	}
	start := time.Now()
	_, _, err = rs.ExecSync(ctx, ctrID, []string{"sleep", "30"}, time.Second)
	if err == nil || time.Since(start) > 20*time.Second {
		t.Errorf("ExecSync past its timeout: %v after %s", err, time.Since(start))
	}

	if err := rs.UpdateContainerResources(ctx, ctrID, &runtimeapi.ContainerResources{
		Linux: &runtimeapi.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 256 << 20},
	}); err != nil {
		t.Errorf("UpdateContainerResources: %v", err)
	}
	stats, err := rs.ContainerStats(ctx, ctrID)
	if err != nil || stats.GetAttributes().GetId() != ctrID {
		t.Errorf("ContainerStats = %v, %v", stats, err)
	}
	all, err := rs.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{PodSandboxId: podID})
	if err != nil || len(all) != 1 {
		t.Errorf("ListContainerStats = %v, %v", all, err)
	}
	if err := rs.ReopenContainerLog(ctx, ctrID); err != nil {
		t.Errorf("ReopenContainerLog: %v", err)
	}
	logData, err := os.ReadFile(filepath.Join(podCfg.LogDirectory, ctrCfg.LogPath))
	if err != nil || !strings.Contains(string(logData), "started") {
		t.Errorf("container log: %q, %v", logData, err)
	}

	// Images.
	imgs, err := is.ListImages(ctx, &runtimeapi.ImageFilter{})
	if err != nil || !hasImage(imgs, testbed.BusyboxImage) || !hasImage(imgs, testbed.PauseImage) {
		t.Errorf("ListImages = %v, %v", imgs, err)
	}
	img, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: testbed.BusyboxImage}, true)
	if err != nil || img.GetImage() == nil {
		t.Errorf("ImageStatus = %v, %v", img, err)
	}
	fs, err := is.ImageFsInfo(ctx)
	if err != nil || len(fs.GetImageFilesystems()) == 0 {
		t.Errorf("ImageFsInfo = %v, %v", fs, err)
	}
	spare := testbed.SpareImage
	if err := is.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: spare}); err != nil {
		t.Errorf("RemoveImage %s: %v", spare, err)
	}
	if img, err := is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: spare}, false); err != nil || img.GetImage() != nil {
		t.Errorf("ImageStatus after RemoveImage = %v, %v", img, err)
	}

	// Tear down through crishim.
	if err := rs.StopContainer(ctx, ctrID, 2); err != nil {
		t.Errorf("StopContainer: %v", err)
	}
	if cs, err := rs.ContainerStatus(ctx, ctrID, false); err != nil || cs.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED {
		t.Errorf("after StopContainer: %v, %v", cs.GetStatus().GetState(), err)
	}
	if err := rs.RemoveContainer(ctx, ctrID); err != nil {
		t.Errorf("RemoveContainer: %v", err)
	}
	if err := rs.StopPodSandbox(ctx, podID); err != nil {
		t.Errorf("StopPodSandbox: %v", err)
	}
	if err := rs.RemovePodSandbox(ctx, podID); err != nil {
		t.Errorf("RemovePodSandbox: %v", err)
	}
	if _, err := rs.PodSandboxStatus(ctx, podID, false); status.Code(err) != codes.NotFound {
		t.Errorf("PodSandboxStatus after removal: %v, want NotFound", err)
	}
}

func hasImage(imgs []*runtimeapi.Image, ref string) bool {
	for _, img := range imgs {
		for _, tag := range img.RepoTags {
			if tag == ref {
				return true
			}
		}
	}
	return false
}
