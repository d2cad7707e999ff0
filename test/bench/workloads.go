package main

import (
	"context"
	"strconv"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// workload is a named call with how many interleaved samples it gets.
type workload struct {
	name    string
	call    call
	samples int
}

func version() call {
	return func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
		_, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
		return err
	}
}

func containerStatus(id string) call {
	return func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
		_, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		return err
	}
}

func listContainers(selector map[string]string) call {
	req := &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: selector}}
	return func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
		_, err := rt.ListContainers(ctx, req)
		return err
	}
}

func listPods(selector map[string]string) call {
	req := &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: selector}}
	return func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
		_, err := rt.ListPodSandbox(ctx, req)
		return err
	}
}

func execSync(id string) call {
	return func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
		_, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}, Timeout: 10})
		return err
	}
}

// relist is what the kubelet's PLEG does every second: list every pod and
// container, then ask the status of the ones that changed (here: statuses).
func relist(podSel, ctrSel map[string]string, statuses []string) call {
	pods, ctrs := listPods(podSel), listContainers(ctrSel)
	return func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
		if err := pods(ctx, rt); err != nil {
			return err
		}
		if err := ctrs(ctx, rt); err != nil {
			return err
		}
		for _, id := range statuses {
			if err := containerStatus(id)(ctx, rt); err != nil {
				return err
			}
		}
		return nil
	}
}

func sized(n int) map[string]string {
	return map[string]string{sizeLabel: strconv.Itoa(n)}
}

// fakeWorkloads expose crishim's own cost: the fake answers at once.
func fakeWorkloads(samples int) []workload {
	ids := []string{fakeID("c", 1), fakeID("c", 2), fakeID("c", 3)}
	return []workload{
		{"Version", version(), samples},
		{"ContainerStatus", containerStatus(fakeID("c", 7)), samples},
		{"ListContainers 10", listContainers(sized(10)), samples},
		{"ListContainers 300", listContainers(sized(300)), samples / 2},
		{"ListContainers 3000", listContainers(sized(3000)), samples / 10},
		{"ListPodSandbox 10", listPods(sized(10)), samples},
		{"ListPodSandbox 300", listPods(sized(300)), samples / 2},
		{"ListPodSandbox 3000", listPods(sized(3000)), samples / 10},
		{"ExecSync true", execSync(ids[0]), samples},
		{"relist 100 pods/300 ctrs", relist(sized(100), sized(300), ids), samples / 4},
	}
}
