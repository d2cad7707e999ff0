package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sync/errgroup"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/test/harness"
)

// Labels that pick the populated pods and containers, and ten of the containers, for list workloads.
const (
	benchLabel = "bench.crishim.io/run"
	tenLabel   = "bench.crishim.io/ten"
)

// populate fills the private runtime like a busy node: pods sandboxes with
// perPod busybox containers each, eight at a time (the kubelet, too, starts
// pods in parallel). The workloads ask for its containers and labels.
func populate(ctx context.Context, cd *harness.Containerd, rt runtimeapi.RuntimeServiceClient, pods, perPod, rounds int) (objects, error) {
	containers := make([]string, pods*perPod)
	var g errgroup.Group
	g.SetLimit(8)
	for i := range pods {
		g.Go(func() error { return populatePod(ctx, cd, rt, containers, i, perPod) })
	}
	if err := g.Wait(); err != nil {
		return objects{}, err
	}
	all := map[string]string{benchLabel: "yes"}
	return objects{status: containers[0], exec: containers[1], ten: map[string]string{tenLabel: "yes"}, all: all, pods: all,
		execRounds: max(rounds/50, 10), throughputCall: containerStatus(containers[0])}, nil
}

func populatePod(ctx context.Context, cd *harness.Containerd, rt runtimeapi.RuntimeServiceClient, containers []string, i, perPod int) error {
	name := fmt.Sprintf("bench-%03d", i)
	logDir := filepath.Join(cd.PodsDir, name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	pidContainer := &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
	pod := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "bench", Uid: "uid-" + name},
		Hostname:     name,
		LogDirectory: logDir,
		Labels:       map[string]string{benchLabel: "yes"},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: pidContainer}},
	}
	resp, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pod})
	if err != nil {
		return fmt.Errorf("run pod %s: %w", name, err)
	}
	for j := range perPod {
		labels := map[string]string{benchLabel: "yes"}
		if i*perPod+j < 10 {
			labels[tenLabel] = "yes"
		}
		cfg := &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("c%d", j)},
			Image:    &runtimeapi.ImageSpec{Image: cd.BusyboxImage},
			Command:  []string{"/bin/sleep", "100000"},
			LogPath:  fmt.Sprintf("c%d.log", j),
			Labels:   labels,
			Linux:    &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: pidContainer}},
		}
		c, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: resp.PodSandboxId, Config: cfg, SandboxConfig: pod})
		if err != nil {
			return fmt.Errorf("create container in %s: %w", name, err)
		}
		if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
			return fmt.Errorf("start container in %s: %w", name, err)
		}
		containers[i*perPod+j] = c.ContainerId
	}
	return nil
}
