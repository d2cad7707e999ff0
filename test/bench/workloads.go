package main

import (
	"context"
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

// objects are what a backend's workloads ask for: a container's status, an
// exec in a container, label selectors for 10 and 300 containers and for
// 100 pods.
type objects struct {
	status, exec   string
	ten, all, pods map[string]string
	execRounds     int // exec probes are slow on a real runtime
	throughputCall call
}

// workloads are the kubelet's calls on o, each rounds rounds but the long
// lists (fewer) and ExecSync (o.execRounds).
func workloads(o objects, rounds int) []workload {
	return []workload{
		{"Version", version, rounds},
		{"ContainerStatus", containerStatus(o.status), rounds},
		{"ListContainers10", listContainers(o.ten), rounds},
		{"ListContainers300", listContainers(o.all), max(rounds/4, 1)},
		{"ListPodSandbox", listPods(o.pods), max(rounds/2, 1)},
		{"ExecSync", execSync(o.exec), o.execRounds},
	}
}

func version(ctx context.Context, rt internalapi.RuntimeService) error {
	_, err := rt.Version(ctx, "v1")
	return err
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
