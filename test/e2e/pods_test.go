package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podConfig is a pod sandbox as the kubelet would describe it; name must be
// unique among the pods alive at the same time.
func podConfig(t *testing.T, name string, labels map[string]string) *runtimeapi.PodSandboxConfig {
	t.Helper()
	logDir := filepath.Join(testbed.PodsDir, name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "e2e", Uid: "uid-" + name},
		Hostname:     name,
		LogDirectory: logDir,
		Labels:       labels,
		Annotations:  map[string]string{"e2e.crishim.io/test": t.Name()},
		// As the kubelet asks for a pod without shareProcessNamespace.
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
}

// containerConfig runs a shell command in the busybox image.
func containerConfig(name, script string, labels map[string]string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: testbed.BusyboxImage},
		Command:  []string{"/bin/sh", "-c", script},
		LogPath:  name + ".log",
		Labels:   labels,
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
}

// runPod runs a sandbox and removes it (with its containers) when the test
// ends, whatever happened in between.
func runPod(t *testing.T, rs internalapi.RuntimeService, cfg *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	ctx := context.Background()
	id, err := rs.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatalf("RunPodSandbox %s: %v", cfg.Metadata.Name, err)
	}
	t.Cleanup(func() { removePod(t, rs, id) })
	return id
}

func removePod(t *testing.T, rs internalapi.RuntimeService, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Containers first, with no grace period, as the kubelet kills a pod: StopPodSandbox
	// alone gives CRI-O's containers the call's whole deadline to heed their stop signal,
	// which the tests' sleepers (PID 1, SIGTERM ignored) never do.
	ctrs, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: id})
	if err != nil {
		t.Logf("cleanup: ListContainers of pod %s: %v", id, err)
	}
	for _, c := range ctrs {
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			if err := rs.StopContainer(ctx, c.GetId(), 0); err != nil {
				t.Logf("cleanup: StopContainer %s: %v", c.GetId(), err)
			}
		}
	}
	if err := rs.StopPodSandbox(ctx, id); err != nil {
		t.Logf("cleanup: StopPodSandbox %s: %v", id, err)
	}
	if err := rs.RemovePodSandbox(ctx, id); err != nil {
		t.Logf("cleanup: RemovePodSandbox %s: %v", id, err)
	}
}

// startContainer creates and starts a container in a pod.
func startContainer(t *testing.T, rs internalapi.RuntimeService, podID string, pod *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) string {
	t.Helper()
	ctx := context.Background()
	id, err := rs.CreateContainer(ctx, podID, cfg, pod)
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", cfg.Metadata.Name, err)
	}
	if err := rs.StartContainer(ctx, id); err != nil {
		t.Fatalf("StartContainer %s: %v", cfg.Metadata.Name, err)
	}
	return id
}

// sleeperScript keeps a container running and doing nothing.
const sleeperScript = "exec sleep 3600"

// podWithContainer runs a pod named after name (through rs) with one
// container, "app", running script.
func podWithContainer(t *testing.T, rs internalapi.RuntimeService, name, script string) (podID string, pod *runtimeapi.PodSandboxConfig, ctrID string) {
	t.Helper()
	pod = podConfig(t, uniqueName(name), nil)
	podID = runPod(t, rs, pod)
	ctrID = startContainer(t, rs, podID, pod, containerConfig("app", script, nil))
	return podID, pod, ctrID
}

// uniqueName gives each pod of a run its own name.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1_000_000_000)
}
