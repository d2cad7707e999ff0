package main

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// sizeLabel in a list filter's label selector asks the fake for that many
// items: the fake keeps no state, so the workload says what it wants.
const sizeLabel = "bench.crishim.io/items"

// fakeRuntime answers at once, so that what a proxy adds is all there is to
// see. Its objects look like the kubelet's (labels, annotations, 64-hex
// IDs), so message sizes are realistic.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

func serveFake(sock string) (stop func(), err error) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("fake runtime: %w", err)
	}
	gs := grpc.NewServer(grpc.MaxSendMsgSize(64<<20), grpc.MaxRecvMsgSize(64<<20))
	runtimeapi.RegisterRuntimeServiceServer(gs, fakeRuntime{})
	go func() { _ = gs.Serve(ln) }()
	return gs.Stop, nil
}

func fakeID(prefix string, i int) string {
	return fmt.Sprintf("%s%062x", prefix, i)
}

func kubeLabels(pod string, i int) map[string]string {
	return map[string]string{
		"io.kubernetes.pod.name":       pod,
		"io.kubernetes.pod.namespace":  "bench",
		"io.kubernetes.pod.uid":        fmt.Sprintf("0b1f2c3d-%04d-4e5f-8a9b-0c1d2e3f4a5b", i),
		"io.kubernetes.container.name": "app",
		"app.kubernetes.io/name":       "bench",
	}
}

func kubeAnnotations(i int) map[string]string {
	return map[string]string{
		"io.kubernetes.container.hash":                   strconv.Itoa(100000 + i),
		"io.kubernetes.container.restartCount":           "0",
		"io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
		"io.kubernetes.pod.terminationGracePeriod":       "30",
	}
}

// sized asks the fake for a list of n items; listSize reads what was asked.
func sized(n int) map[string]string { return map[string]string{sizeLabel: strconv.Itoa(n)} }

func listSize(selector map[string]string) int {
	n, _ := strconv.Atoi(selector[sizeLabel])
	return n
}

// fakeObjects are the fake's workloads: it answers at once, so they expose
// crishim's own cost.
func fakeObjects(rounds int) objects {
	return objects{status: fakeID("c", 7), exec: fakeID("c", 1), ten: sized(10), all: sized(300), pods: sized(100),
		execRounds: rounds, throughputCall: version}
}

func (fakeRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fake", RuntimeVersion: "1.0.0", RuntimeApiVersion: "v1"}, nil
}

func (fakeRuntime) ContainerStatus(_ context.Context, in *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
		Id:          in.GetContainerId(),
		Metadata:    &runtimeapi.ContainerMetadata{Name: "app"},
		State:       runtimeapi.ContainerState_CONTAINER_RUNNING,
		CreatedAt:   1700000000000000000,
		StartedAt:   1700000000100000000,
		Image:       &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:latest"},
		ImageRef:    "sha256:" + fakeID("", 1),
		Labels:      kubeLabels("pod-0", 0),
		Annotations: kubeAnnotations(0),
		LogPath:     "/var/log/pods/bench_pod-0/app/0.log",
	}}, nil
}

func (fakeRuntime) ListContainers(_ context.Context, in *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	out := make([]*runtimeapi.Container, listSize(in.GetFilter().GetLabelSelector()))
	for i := range out {
		out[i] = &runtimeapi.Container{
			Id:           fakeID("c", i),
			PodSandboxId: fakeID("p", i/3),
			Metadata:     &runtimeapi.ContainerMetadata{Name: "app"},
			Image:        &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:latest"},
			ImageRef:     "sha256:" + fakeID("", 1),
			State:        runtimeapi.ContainerState_CONTAINER_RUNNING,
			CreatedAt:    1700000000000000000 + int64(i),
			Labels:       kubeLabels(fmt.Sprintf("pod-%d", i/3), i),
			Annotations:  kubeAnnotations(i),
		}
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

func (fakeRuntime) ListPodSandbox(_ context.Context, in *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	out := make([]*runtimeapi.PodSandbox, listSize(in.GetFilter().GetLabelSelector()))
	for i := range out {
		out[i] = &runtimeapi.PodSandbox{
			Id:          fakeID("p", i),
			Metadata:    &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("pod-%d", i), Namespace: "bench", Uid: fmt.Sprintf("uid-%d", i)},
			State:       runtimeapi.PodSandboxState_SANDBOX_READY,
			CreatedAt:   1700000000000000000 + int64(i),
			Labels:      kubeLabels(fmt.Sprintf("pod-%d", i), i),
			Annotations: kubeAnnotations(i),
		}
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

func (fakeRuntime) ExecSync(context.Context, *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	return &runtimeapi.ExecSyncResponse{}, nil
}
