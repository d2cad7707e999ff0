package shim

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/namespaces"
	"github.com/crishim/crishim/proxy"
)

// fakeContainer is one container of targetFakeRuntime.
type fakeContainer struct {
	pod         string
	state       runtimeapi.ContainerState
	annotations map[string]string
	config      *runtimeapi.ContainerConfig
	pid         int

	// The containerd side of the container (containerd_fake_test.go).
	labels map[string]string
	spec   []byte         // the OCI spec, JSON
	exitOn syscall.Signal // the signal its process exits on; 0: none does
	done   chan struct{}  // closed when its process exits; nil: nobody waits
}

// targetFakeRuntime is an in-process CRI runtime for the TARGET unit tests.
// Processes are numbers and PID namespaces entries in a map, which the
// shim's pidNamespace reads: that is how a runtime ignoring TARGET is
// played without root. It embeds Unimplemented on purpose: it is the
// backend, not the proxy.
type targetFakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	name, version string
	ignoreTarget  bool // start TARGET containers in a namespace of their own
	exitAtStart   bool // the started process is gone before anyone looks

	mu           sync.Mutex
	containers   map[string]*fakeContainer
	pidNS        map[int]uint64
	nextPID      int
	creates      []*runtimeapi.CreateContainerRequest
	stopped      []string
	stopTimeouts []int64 // each StopContainer's timeout, in the order of stopped
	// podAnnotations are the pod sandboxes' annotations, for
	// PodSandboxStatus; a pod missing here does not exist.
	podAnnotations map[string]map[string]string

	ctrd fakeContainerdState
}

func newTargetFake() *targetFakeRuntime {
	return &targetFakeRuntime{name: "containerd", version: "1.6.20~ds1", containers: map[string]*fakeContainer{}, pidNS: map[int]uint64{}, nextPID: 100}
}

// add puts a container in the fake; running ones get a process in a PID
// namespace of their own.
func (f *targetFakeRuntime) add(id, pod string, state runtimeapi.ContainerState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &fakeContainer{pod: pod, state: state}
	if state == runtimeapi.ContainerState_CONTAINER_RUNNING {
		c.pid = f.newProcess(0)
	}
	f.containers[id] = c
}

// newProcess makes a process in namespace ns, or in a new one when 0.
func (f *targetFakeRuntime) newProcess(ns uint64) int {
	f.nextPID++
	if ns == 0 {
		ns = uint64(4026530000 + f.nextPID)
	}
	f.pidNS[f.nextPID] = ns
	return f.nextPID
}

func (f *targetFakeRuntime) setState(id string, state runtimeapi.ContainerState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers[id].state = state
}

func (f *targetFakeRuntime) pidNamespace(pid int) (namespaces.ID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ns, ok := f.pidNS[pid]
	if !ok {
		return namespaces.ID{}, fmt.Errorf("pid %d: %w", pid, namespaces.ErrNoProcess)
	}
	return namespaces.ID{Dev: 4, Ino: ns}, nil
}

func (f *targetFakeRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: f.name, RuntimeVersion: f.version, RuntimeApiVersion: "v1"}, nil
}

func (f *targetFakeRuntime) ListContainers(_ context.Context, in *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.Container
	for id, c := range f.containers {
		if want := in.GetFilter().GetId(); want != "" && !strings.HasPrefix(id, want) { // containerd resolves unique prefixes
			continue
		}
		out = append(out, &runtimeapi.Container{Id: id, PodSandboxId: c.pod, State: c.state, Annotations: c.annotations})
	}
	return &runtimeapi.ListContainersResponse{Containers: out}, nil
}

// ListPodSandbox lists the pods of podAnnotations, ready, resolving unique
// ID prefixes as containerd does.
func (f *targetFakeRuntime) ListPodSandbox(_ context.Context, in *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*runtimeapi.PodSandbox
	for id, a := range f.podAnnotations {
		if want := in.GetFilter().GetId(); want != "" && !strings.HasPrefix(id, want) {
			continue
		}
		out = append(out, &runtimeapi.PodSandbox{Id: id, State: runtimeapi.PodSandboxState_SANDBOX_READY, Annotations: a})
	}
	return &runtimeapi.ListPodSandboxResponse{Items: out}, nil
}

func (f *targetFakeRuntime) PodSandboxStatus(_ context.Context, in *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.podAnnotations[in.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %q not found", in.GetPodSandboxId())
	}
	return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: in.GetPodSandboxId(), Annotations: a}}, nil
}

func (f *targetFakeRuntime) ContainerStatus(_ context.Context, in *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[in.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", in.GetContainerId())
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{Id: in.GetContainerId(), State: c.state, Annotations: c.annotations}}
	if in.GetVerbose() {
		resp.Info = map[string]string{"info": fmt.Sprintf(`{"pid":%d}`, c.pid)}
	}
	return resp, nil
}

func (f *targetFakeRuntime) CreateContainer(_ context.Context, in *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, in)
	id := fmt.Sprintf("ctr%d", len(f.creates))
	f.containers[id] = &fakeContainer{pod: in.GetPodSandboxId(), state: runtimeapi.ContainerState_CONTAINER_CREATED,
		annotations: in.GetConfig().GetAnnotations(), config: in.GetConfig(), spec: []byte(fakeOCISpec)}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func (f *targetFakeRuntime) StartContainer(_ context.Context, in *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.containers[in.GetContainerId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", in.GetContainerId())
	}
	var ns uint64
	if opts := c.config.GetLinux().GetSecurityContext().GetNamespaceOptions(); opts.GetPid() == runtimeapi.NamespaceMode_TARGET && !f.ignoreTarget {
		ns = f.pidNS[f.containers[opts.GetTargetId()].pid]
	}
	if pid, ok := specPIDNamespaceOwner(c.spec); ok {
		ns = f.pidNS[pid] // crishim's emulation pointed the spec at this process's namespace
	}
	c.pid = f.newProcess(ns)
	c.state = runtimeapi.ContainerState_CONTAINER_RUNNING
	if f.exitAtStart {
		delete(f.pidNS, c.pid)
	}
	return &runtimeapi.StartContainerResponse{}, nil
}

func (f *targetFakeRuntime) StopContainer(_ context.Context, in *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, in.GetContainerId())
	f.stopTimeouts = append(f.stopTimeouts, in.GetTimeout())
	if c, ok := f.containers[in.GetContainerId()]; ok {
		f.exitLocked(c)
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

// serveFakeRuntime serves rt on a unix socket and returns a backend
// connected to it.
func serveFakeRuntime(t *testing.T, rt runtimeapi.RuntimeServiceServer) *proxy.Backend {
	t.Helper()
	return serveFakeRuntimeAndImages(t, rt, nil)
}

// serveFakeRuntimeAndImages serves img too (nil: none) on the same socket,
// as containerd does.
func serveFakeRuntimeAndImages(t *testing.T, rt runtimeapi.RuntimeServiceServer, img runtimeapi.ImageServiceServer) *proxy.Backend {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "runtime.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(gs, rt)
	if img != nil {
		runtimeapi.RegisterImageServiceServer(gs, img)
	}
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	b, err := proxy.Dial(proxy.BackendOptions{RuntimeEndpoint: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// startTargetShim serves f on a unix socket and returns a shim in front of
// it whose namespace lookups read f's table.
func startTargetShim(t *testing.T, f *targetFakeRuntime, mode string) *Shim {
	t.Helper()
	s := New(serveFakeRuntime(t, f), Options{PIDTargetMode: mode})
	s.target.pidNamespace = f.pidNamespace
	return s
}
