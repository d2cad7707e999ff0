package shim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"syscall"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/namespaces"
)

// The fake containerd is the containerd side of targetFakeRuntime: the
// same containers, seen through containerd's task service and container
// store, as crishim's containerdClient sees a real one. A running CRI
// container has a running task with its process's PID; a created or exited
// one has no task (containerd's CRI plugin deletes an exited task at once).
// Its containers carry labels and an OCI spec. Every change crishim makes
// through it is recorded in calls, in order, so that a test can say what came
// before what.

// fakeOCISpec is the spec of a container created in the fake: a PID
// namespace of its own, and a field crishim's runtime-spec need not know.
const fakeOCISpec = `{"ociVersion":"1.2.0","linux":{"namespaces":[{"type":"pid"},{"type":"mount"}]},"future":{"x":1}}`

// fakeContainerdState is targetFakeRuntime's containerd side, under its mu.
type fakeContainerdState struct {
	calls     []string // "label <id> <key>=<signal>", "spec <id>", "kill <id> <SIGNAME>"
	down      error    // Version's error: the containerd API does not answer
	updateErr error    // the container store's Update fails with it
	killErr   error    // the task service's Kill fails with it (a gRPC status)
	// onKill and onWait run (outside mu) after a Kill reached a running
	// task and when a Wait starts waiting for one: a test's hooks for "at
	// this moment".
	onKill func(id string)
	onWait func(id string)
}

// containerd is a containerd API client in front of f's containers.
func (f *targetFakeRuntime) containerd() *Containerd {
	return &Containerd{client: fakeContainerd{f}, address: "/run/fake-containerd.sock", namespace: "k8s.io"}
}

// calls are the changes crishim made through the containerd API, in order.
func (f *targetFakeRuntime) containerdCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ctrd.calls...)
}

// exitLocked ends a container's process: its CRI state says exited, its
// containerd task is gone, and whoever waits for it returns.
func (f *targetFakeRuntime) exitLocked(c *fakeContainer) {
	c.state = runtimeapi.ContainerState_CONTAINER_EXITED
	delete(f.pidNS, c.pid)
	if c.done != nil {
		close(c.done)
		c.done = nil
	}
}

// runningLocked is the container id when its task runs.
func (f *targetFakeRuntime) runningLocked(id string) (*fakeContainer, error) {
	c, ok := f.containers[id]
	if !ok || c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, status.Errorf(codes.NotFound, "task %s: not found", id)
	}
	return c, nil
}

// specPIDNamespaceOwner is the process whose PID namespace a spec joins
// (linux.namespaces' pid entry has the path /proc/<pid>/ns/pid).
func specPIDNamespaceOwner(spec []byte) (int, bool) {
	var s struct {
		Linux struct {
			Namespaces []struct{ Type, Path string } `json:"namespaces"`
		} `json:"linux"`
	}
	if json.Unmarshal(spec, &s) != nil {
		return 0, false
	}
	for _, ns := range s.Linux.Namespaces {
		var pid int
		if ns.Type == "pid" && ns.Path != "" {
			if _, err := fmt.Sscanf(ns.Path, "/proc/%d/ns/pid", &pid); err == nil && namespaces.PIDPath(pid) == ns.Path {
				return pid, true
			}
		}
	}
	return 0, false
}

// fakeContainerd is crishim's containerdClient over a targetFakeRuntime.
type fakeContainerd struct{ f *targetFakeRuntime }

func (c fakeContainerd) TaskService() tasks.TasksClient     { return fakeTasks{f: c.f} }
func (c fakeContainerd) ContainerService() containers.Store { return fakeContainerStore(c) }
func (c fakeContainerd) Close() error                       { return nil }

func (c fakeContainerd) Version(context.Context) (client.Version, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.f.ctrd.down != nil {
		return client.Version{}, c.f.ctrd.down
	}
	return client.Version{Version: "v2.4.2"}, nil
}

// fakeTasks is the task service. The methods crishim does not call are
// the nil embedded interface's: calling one fails the test loudly.
type fakeTasks struct {
	tasks.TasksClient
	f *targetFakeRuntime
}

func (t fakeTasks) Get(_ context.Context, in *tasks.GetRequest, _ ...grpc.CallOption) (*tasks.GetResponse, error) {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	c, err := t.f.runningLocked(in.GetContainerID())
	if err != nil {
		return nil, err
	}
	return &tasks.GetResponse{Process: &task.Process{ContainerID: in.GetContainerID(), Pid: uint32(c.pid), Status: task.Status_RUNNING}}, nil
}

func (t fakeTasks) Kill(_ context.Context, in *tasks.KillRequest, _ ...grpc.CallOption) (*emptypb.Empty, error) {
	id, sig := in.GetContainerID(), syscall.Signal(in.GetSignal())
	t.f.mu.Lock()
	t.f.ctrd.calls = append(t.f.ctrd.calls, "kill "+id+" "+unix.SignalName(sig))
	c, err := t.f.runningLocked(id)
	if err == nil {
		err = t.f.ctrd.killErr
	}
	if err != nil {
		t.f.mu.Unlock()
		return nil, err
	}
	if sig == c.exitOn || sig == syscall.SIGKILL {
		t.f.exitLocked(c)
	}
	hook := t.f.ctrd.onKill
	t.f.mu.Unlock()
	if hook != nil {
		hook(id)
	}
	return &emptypb.Empty{}, nil
}

func (t fakeTasks) Wait(ctx context.Context, in *tasks.WaitRequest, _ ...grpc.CallOption) (*tasks.WaitResponse, error) {
	id := in.GetContainerID()
	t.f.mu.Lock()
	c, err := t.f.runningLocked(id)
	if err != nil {
		t.f.mu.Unlock()
		return nil, err
	}
	if c.done == nil {
		c.done = make(chan struct{})
	}
	done, hook := c.done, t.f.ctrd.onWait
	t.f.mu.Unlock()
	if hook != nil {
		hook(id)
	}
	select {
	case <-done:
		return &tasks.WaitResponse{}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// fakeContainerStore is the container store; like containerd's client's,
// its errors are errdefs errors, not gRPC statuses.
type fakeContainerStore fakeContainerd

func (s fakeContainerStore) Get(_ context.Context, id string) (containers.Container, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	c, ok := s.f.containers[id]
	if !ok {
		return containers.Container{}, fmt.Errorf("container %q: %w", id, errdefs.ErrNotFound)
	}
	rec := containers.Container{ID: id, Labels: maps.Clone(c.labels)}
	if c.spec != nil {
		rec.Spec = &anypb.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Spec", Value: c.spec}
	}
	return rec, nil
}

// Update writes only the field paths it is given, and refuses to be given
// none: crishim must never write back a whole record, which would undo a
// concurrent change of the runtime's.
func (s fakeContainerStore) Update(_ context.Context, rec containers.Container, fieldpaths ...string) (containers.Container, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	c, ok := s.f.containers[rec.ID]
	if !ok {
		return containers.Container{}, fmt.Errorf("container %q: %w", rec.ID, errdefs.ErrNotFound)
	}
	if len(fieldpaths) == 0 {
		return containers.Container{}, fmt.Errorf("fake containerd: an update of container %s without field paths would overwrite all of it: %w", rec.ID, errdefs.ErrInvalidArgument)
	}
	if err := s.f.ctrd.updateErr; err != nil {
		return containers.Container{}, err
	}
	for _, path := range fieldpaths {
		switch key, ok := strings.CutPrefix(path, "labels."); {
		case ok:
			if c.labels == nil {
				c.labels = map[string]string{}
			}
			c.labels[key] = rec.Labels[key]
			sig, _, _ := strings.Cut(rec.Labels[key], " ")
			s.f.ctrd.calls = append(s.f.ctrd.calls, "label "+rec.ID+" "+key+"="+sig)
		case path == "spec":
			c.spec = rec.Spec.GetValue()
			s.f.ctrd.calls = append(s.f.ctrd.calls, "spec "+rec.ID)
		default:
			return containers.Container{}, fmt.Errorf("fake containerd: field path %q: %w", path, errdefs.ErrNotImplemented)
		}
	}
	return rec, nil
}

func (s fakeContainerStore) List(context.Context, ...string) ([]containers.Container, error) {
	return nil, fmt.Errorf("fake containerd: List: %w", errdefs.ErrNotImplemented)
}

func (s fakeContainerStore) Create(context.Context, containers.Container) (containers.Container, error) {
	return containers.Container{}, fmt.Errorf("fake containerd: Create: %w", errdefs.ErrNotImplemented)
}

func (s fakeContainerStore) Delete(context.Context, string) error {
	return fmt.Errorf("fake containerd: Delete: %w", errdefs.ErrNotImplemented)
}
