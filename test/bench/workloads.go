package main

import (
	"context"
	"strconv"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// workload is a kubelet call, named as its benchmark, with how many
// interleaved rounds it gets.
type workload struct {
	name   string
	call   call
	rounds int
}

func version() call {
	return func(ctx context.Context, rt internalapi.RuntimeService) error {
		_, err := rt.Version(ctx, "v1")
		return err
	}
}

func containerStatus(id string) call {
	return func(ctx context.Context, rt internalapi.RuntimeService) error {
		_, err := rt.ContainerStatus(ctx, id, false)
		return err
	}
}

func listContainers(selector map[string]string) call {
	filter := &runtimeapi.ContainerFilter{LabelSelector: selector}
	return func(ctx context.Context, rt internalapi.RuntimeService) error {
		_, err := rt.ListContainers(ctx, filter)
		return err
	}
}

func listPods(selector map[string]string) call {
	filter := &runtimeapi.PodSandboxFilter{LabelSelector: selector}
	return func(ctx context.Context, rt internalapi.RuntimeService) error {
		_, err := rt.ListPodSandbox(ctx, filter)
		return err
	}
}

// execSync is an exec probe's call, `true` with the kubelet's default
// probe timeout of 1 s.
func execSync(id string) call {
	return func(ctx context.Context, rt internalapi.RuntimeService) error {
		_, _, err := rt.ExecSync(ctx, id, []string{"true"}, time.Second)
		return err
	}
}

// sized asks the fake runtime for a list of n items.
func sized(n int) map[string]string {
	return map[string]string{sizeLabel: strconv.Itoa(n)}
}

// fakeWorkloads expose crishim's own cost: the fake answers at once.
func fakeWorkloads(rounds int) []workload {
	return []workload{
		{"Version", version(), rounds},
		{"ContainerStatus", containerStatus(fakeID("c", 7)), rounds},
		{"ListContainers10", listContainers(sized(10)), rounds},
		{"ListContainers300", listContainers(sized(300)), max(rounds/4, 1)},
		{"ListPodSandbox", listPods(sized(100)), max(rounds/2, 1)},
		{"ExecSync", execSync(fakeID("c", 1)), rounds},
	}
}

// containerdWorkloads are the same calls against a real runtime holding
// 100 pods of 3 containers.
func containerdWorkloads(p *populated, rounds int) []workload {
	return []workload{
		{"Version", version(), rounds},
		{"ContainerStatus", containerStatus(p.containers[0]), rounds},
		{"ListContainers10", listContainers(map[string]string{tenLabel: "yes"}), rounds},
		{"ListContainers300", listContainers(map[string]string{benchLabel: "yes"}), max(rounds/4, 1)},
		{"ListPodSandbox", listPods(map[string]string{benchLabel: "yes"}), max(rounds/2, 1)},
		{"ExecSync", execSync(p.containers[1]), max(rounds/50, 10)},
	}
}
