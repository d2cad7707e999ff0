package shim

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/proxy"
)

// prefixRuntime resolves unique ID prefixes as containerd and CRI-O do, and
// labels its containers as the kubelet does.
type prefixRuntime struct {
	*targetFakeRuntime
	removed []string
}

func (f *prefixRuntime) resolve(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var found string
	for full := range f.containers {
		if strings.HasPrefix(full, id) {
			if found != "" {
				return id // ambiguous
			}
			found = full
		}
	}
	return found
}

func (f *prefixRuntime) ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	resp, err := f.targetFakeRuntime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: f.resolve(in.GetContainerId())})
	if err == nil {
		resp.Status.Labels = map[string]string{labelPodNamespace: "shop", labelPodName: "web", labelContainerName: "app"}
	}
	return resp, err
}

func (f *prefixRuntime) RemoveContainer(_ context.Context, in *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, in.GetContainerId())
	return &runtimeapi.RemoveContainerResponse{}, nil
}

// serveAudited serves s as crishim does: its criCall interceptors, and the
// relay sending it the calls they audit.
func serveAudited(t *testing.T, s *Shim) runtimeapi.RuntimeServiceClient {
	t.Helper()
	unary, stream := s.CRICallInterceptors()
	return serveShimWith(t, s, proxy.ServerOptions{
		Intercept: s.Intercepted(), Services: s.Services(),
		Unary: []grpc.UnaryServerInterceptor{unary}, Stream: []grpc.StreamServerInterceptor{stream},
		Audited: CRICallsAudited(s.opts.Audit.CRICalls()),
	})
}

// TestCRICallsOfOtherCallersAreAudited: a caller other than the kubelet (this
// test) that changes something, or reads a container's whole config
// (a verbose ContainerStatus), is audited with its caller, the full ID of
// the container it named by a prefix, the pod, the method and the code,
// whether crishim relays the call or intercepts it; what only reads is not,
// and nothing is at level none.
func TestCRICallsOfOtherCallersAreAudited(t *testing.T) {
	const full = "abcdef0123456789"
	for _, level := range []string{audit.CRICallsMutating, audit.CRICallsNone} {
		t.Run(level, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			l, err := audit.Open(audit.Config{Path: path, CRICalls: level}, metrics.NewAudit(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			f := &prefixRuntime{targetFakeRuntime: newTargetFake()}
			f.add(full, "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
			s := New(serveFakeRuntime(t, f), Options{StopSignalMode: StopSignalNative, Audit: l})
			rs := serveAudited(t, s)
			ctx := context.Background()
			if _, err := rs.ListContainers(ctx, &runtimeapi.ListContainersRequest{}); err != nil {
				t.Fatal(err)
			}
			if _, err := rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: "abc"}); err != nil {
				t.Fatal(err)
			}
			if _, err := rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: "abc"}); err != nil {
				t.Fatal(err)
			}
			_, err = rs.UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{ContainerId: "nosuch"})
			if status.Code(err) != codes.Unimplemented {
				t.Fatalf("UpdateContainerResources: %v, want the fake's Unimplemented", err)
			}
			// crictl inspect: verbose, the container's whole config.
			for _, verbose := range []bool{false, true} {
				if _, err := rs.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: "abc", Verbose: verbose}); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			evs, err := audit.Decode(strings.NewReader(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			if level == audit.CRICallsNone {
				if len(evs) != 0 {
					t.Fatalf("level none wrote %d events:\n%s", len(evs), b)
				}
				return
			}
			type want struct{ method, id, code string }
			wants := []want{
				{runtimeapi.RuntimeService_StopContainer_FullMethodName, full, "OK"},
				{runtimeapi.RuntimeService_RemoveContainer_FullMethodName, full, "OK"},
				{runtimeapi.RuntimeService_UpdateContainerResources_FullMethodName, "nosuch", "Unimplemented"},
				{runtimeapi.RuntimeService_ContainerStatus_FullMethodName, full, "OK"}, // the verbose one
			}
			if len(evs) != 2*len(wants) {
				t.Fatalf("%d events, want a started and an ended one for each of %d calls:\n%s", len(evs), len(wants), b)
			}
			for i, w := range wants {
				for _, ev := range evs[2*i : 2*i+2] {
					c := ev.Caller
					if ev.Kind != audit.KindCRICall || ev.Method != w.method || ev.ContainerID != w.id ||
						c == nil || int(c.PID) != os.Getpid() || c.Kubelet || c.Exe == "" {
						t.Errorf("event %+v (caller %+v); want %s of %s by this process", ev, c, w.method, w.id)
					}
					if w.id == full && (ev.PodNamespace != "shop" || ev.PodName != "web" || ev.ContainerName != "app") {
						t.Errorf("event %+v does not name the pod", ev)
					}
				}
				if end := evs[2*i+1]; end.Stage != audit.StageEnded || end.Code != w.code {
					t.Errorf("ended event %+v; want code %s", end, w.code)
				}
			}
		})
	}
}

// The read-only table names compiled methods only (a typo would audit a
// read-only call, or a renamed method fall out of it).
func TestReadOnlyMethodsExist(t *testing.T) {
	for m := range readOnlyMethods {
		if methodDescriptor(m) == nil {
			t.Errorf("%s: no such method", m)
		}
	}
	audited := CRICallsAudited(audit.CRICallsMutating)
	for _, m := range []string{
		runtimeapi.RuntimeService_RunPodSandbox_FullMethodName, runtimeapi.RuntimeService_RemovePodSandbox_FullMethodName,
		runtimeapi.RuntimeService_Exec_FullMethodName, runtimeapi.ImageService_PullImage_FullMethodName,
		"/crishim.v1.Crishim/Signal", "/runtime.v1.RuntimeService/SomethingNewer",
	} {
		if !audited(m) {
			t.Errorf("%s is not audited at level mutating", m)
		}
	}
	for m := range verboseReads {
		if methodDescriptor(m) == nil || !audited(m) {
			t.Errorf("verbose read %s: no such method, or not seen at level mutating", m)
		}
	}
}

// What a request or answer names, decoded or as raw bytes on the relay.
func TestTargetOf(t *testing.T) {
	pod := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "shop", Name: "web", Uid: "u1"}}
	for _, tc := range []struct {
		method string
		msg    proto.Message
		answer bool
		want   target
	}{
		{runtimeapi.RuntimeService_RemoveContainer_FullMethodName, &runtimeapi.RemoveContainerRequest{ContainerId: "c1"}, false, target{containerID: "c1"}},
		{runtimeapi.RuntimeService_StopPodSandbox_FullMethodName, &runtimeapi.StopPodSandboxRequest{PodSandboxId: "p1"}, false, target{podSandboxID: "p1"}},
		{runtimeapi.RuntimeService_RunPodSandbox_FullMethodName, &runtimeapi.RunPodSandboxRequest{Config: pod}, false,
			target{pod: struct{ namespace, name, uid string }{"shop", "web", "u1"}}},
		{runtimeapi.RuntimeService_RunPodSandbox_FullMethodName, &runtimeapi.RunPodSandboxResponse{PodSandboxId: "p2"}, true, target{podSandboxID: "p2"}},
		{runtimeapi.RuntimeService_CreateContainer_FullMethodName, &runtimeapi.CreateContainerRequest{PodSandboxId: "p1", SandboxConfig: pod,
			Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "app"}}}, false,
			target{podSandboxID: "p1", pod: struct{ namespace, name, uid string }{"shop", "web", "u1"}, containerName: "app"}},
		{runtimeapi.RuntimeService_Version_FullMethodName, &runtimeapi.VersionRequest{Version: "v1"}, false, target{}},
	} {
		if got := targetOf(tc.msg); got != tc.want {
			t.Errorf("%s decoded: %+v, want %+v", tc.method, got, tc.want)
		}
		b, err := proto.Marshal(tc.msg)
		if err != nil {
			t.Fatal(err)
		}
		md := methodDescriptor(tc.method)
		desc := md.Input()
		if tc.answer {
			desc = md.Output()
		}
		if got := rawTarget(desc, proxy.NewFrame(b)); got != tc.want {
			t.Errorf("%s raw: %+v, want %+v", tc.method, got, tc.want)
		}
	}
	if got := rawTarget(methodDescriptor(runtimeapi.RuntimeService_RemoveContainer_FullMethodName).Input(), proxy.NewFrame([]byte{0xff, 0xff})); got != (target{}) {
		t.Errorf("garbage decoded to %+v", got)
	}
}
