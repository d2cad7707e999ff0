package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/test/harness"
)

// populated is the private containerd filled like a busy node.
type populated struct {
	pods, containers []string
}

// Labels that pick a subset of the populated node for list workloads.
const (
	benchLabel = "bench.crishim.io/run"
	tenLabel   = "bench.crishim.io/ten"
)

// populate runs pods sandboxes with perPod busybox containers each, eight at
// a time (the kubelet, too, starts pods in parallel).
func populate(ctx context.Context, cd *harness.Containerd, rt runtimeapi.RuntimeServiceClient, pods, perPod int) (*populated, error) {
	out := &populated{pods: make([]string, pods), containers: make([]string, pods*perPod)}
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range pods {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := populatePod(ctx, cd, rt, out, i, perPod); err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out, firstErr
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func populatePod(ctx context.Context, cd *harness.Containerd, rt runtimeapi.RuntimeServiceClient, out *populated, i, perPod int) error {
	name := fmt.Sprintf("bench-%03d", i)
	logDir := filepath.Join(cd.PodsDir, name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	labels := map[string]string{benchLabel: "yes"}
	if i < 10 {
		labels[tenLabel] = "yes"
	}
	pidContainer := &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
	pod := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "bench", Uid: "uid-" + name},
		Hostname:     name,
		LogDirectory: logDir,
		Labels:       labels,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: pidContainer}},
	}
	resp, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pod})
	if err != nil {
		return fmt.Errorf("run pod %s: %w", name, err)
	}
	out.pods[i] = resp.PodSandboxId
	for j := range perPod {
		ctrLabels := map[string]string{benchLabel: "yes"}
		if i*perPod+j < 10 {
			ctrLabels[tenLabel] = "yes"
		}
		cfg := &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("c%d", j)},
			Image:    &runtimeapi.ImageSpec{Image: cd.BusyboxImage},
			Command:  []string{"/bin/sleep", "100000"},
			LogPath:  fmt.Sprintf("c%d.log", j),
			Labels:   ctrLabels,
			Linux:    &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: pidContainer}},
		}
		c, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: resp.PodSandboxId, Config: cfg, SandboxConfig: pod})
		if err != nil {
			return fmt.Errorf("create container in %s: %w", name, err)
		}
		if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
			return fmt.Errorf("start container in %s: %w", name, err)
		}
		out.containers[i*perPod+j] = c.ContainerId
	}
	return nil
}
