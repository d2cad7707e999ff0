package shim

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/proxy"
)

func targetRequest(pod, target string) *runtimeapi.CreateContainerRequest {
	return &runtimeapi.CreateContainerRequest{
		PodSandboxId: pod,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "debugger"},
			Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_TARGET, TargetId: target},
			}},
		},
	}
}

func TestCreateContainerWithTarget(t *testing.T) {
	tests := []struct {
		name            string
		mode            string
		runtime         string // "name version"
		req             *runtimeapi.CreateContainerRequest
		code            codes.Code
		msg             string                   // part of the error message
		wantPid         runtimeapi.NamespaceMode // as forwarded, when created
		wantAnnotations bool
	}{
		{name: "no target id", mode: "native", req: targetRequest("pod1", ""), code: codes.InvalidArgument, msg: "namespace_options.target_id"},
		{name: "unknown target", mode: "native", req: targetRequest("pod1", "nosuch"), code: codes.NotFound, msg: `"nosuch" not found`},
		{name: "target not running", mode: "native", req: targetRequest("pod1", "exited"), code: codes.FailedPrecondition, msg: "CONTAINER_EXITED, not running"},
		{name: "target in another pod", mode: "native", req: targetRequest("pod2", "app"), code: codes.PermissionDenied, msg: "in pod sandbox pod1, not in pod2"},
		{name: "emulate without containerd", mode: "emulate", req: targetRequest("pod1", "app"), code: codes.FailedPrecondition, msg: "--containerd-address is empty"},
		// CRI-O honours TARGET; like any runtime crishim does not know to
		// ignore it, it is given TARGET and verified after start.
		{name: "auto, CRI-O, no containerd", mode: "auto", runtime: "cri-o 1.34.0", req: targetRequest("pod1", "app"), wantPid: runtimeapi.NamespaceMode_TARGET, wantAnnotations: true},
		{name: "auto, old containerd", mode: "auto", runtime: "containerd v1.4.13", req: targetRequest("pod1", "app"), code: codes.FailedPrecondition, msg: "ignores TARGET (honoured since 1.5)"},
		{name: "auto, containerd 1.6", mode: "auto", runtime: "containerd 1.6.20~ds1", req: targetRequest("pod1", "app"), wantPid: runtimeapi.NamespaceMode_TARGET, wantAnnotations: true},
		{name: "native", mode: "native", req: targetRequest("pod1", "app"), wantPid: runtimeapi.NamespaceMode_TARGET, wantAnnotations: true},
		{name: "unique prefix of the target", mode: "native", req: targetRequest("pod1", "ap"), wantPid: runtimeapi.NamespaceMode_TARGET, wantAnnotations: true},
		{
			name: "not TARGET: passed on as it is", mode: "native",
			req:     &runtimeapi.CreateContainerRequest{PodSandboxId: "pod1", Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "plain"}}},
			wantPid: runtimeapi.NamespaceMode_POD,
		},
		{
			name: "crishim's annotation from a client", mode: "native",
			req: &runtimeapi.CreateContainerRequest{PodSandboxId: "pod1", Config: &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: "forged"}, Annotations: map[string]string{PIDTargetAnnotation: `{"target":"app","mode":"emulate"}`},
			}},
			code: codes.InvalidArgument, msg: `config.annotations["crishim.io/pid-target"]`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTargetFake()
			if tt.runtime != "" {
				f.name, f.version, _ = strings.Cut(tt.runtime, " ")
			}
			f.add("app", "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
			f.add("exited", "pod1", runtimeapi.ContainerState_CONTAINER_EXITED)
			s := startTargetShim(t, f, tt.mode)
			resp, err := s.target.create(context.Background(), tt.req)
			if tt.code != codes.OK {
				if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
					t.Fatalf("got %v; want %s with %q", err, tt.code, tt.msg)
				}
				if len(f.creates) != 0 {
					t.Errorf("the runtime got %d CreateContainer calls for a rejected request", len(f.creates))
				}
				return
			}
			if err != nil {
				t.Fatalf("CreateContainer: %v", err)
			}
			if len(f.creates) != 1 || resp.GetContainerId() != "ctr1" {
				t.Fatalf("runtime saw %d creates, answer %v", len(f.creates), resp)
			}
			fwd := f.creates[0].GetConfig()
			if got := fwd.GetLinux().GetSecurityContext().GetNamespaceOptions().GetPid(); got != tt.wantPid {
				t.Errorf("forwarded pid mode %s, want %s", got, tt.wantPid)
			}
			rec, ok := fwd.GetAnnotations()[PIDTargetAnnotation]
			if ok != tt.wantAnnotations {
				t.Fatalf("annotation present %v, want %v (%q)", ok, tt.wantAnnotations, rec)
			}
			if ok {
				r, err := parseTargetRecord(rec)
				if err != nil || r.Target != "app" || r.Mode != PIDTargetNative {
					t.Errorf("annotation %q: %+v %v", rec, r, err)
				}
			}
		})
	}
}

// created makes a container through the shim, as the kubelet would.
func created(t *testing.T, s *Shim, pod, target string) string {
	t.Helper()
	resp, err := s.target.create(context.Background(), targetRequest(pod, target))
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetContainerId()
}

func TestStartContainerWithTarget(t *testing.T) {
	tests := []struct {
		name        string
		setup       func(f *targetFakeRuntime)
		between     func(f *targetFakeRuntime) // after create, before start
		code        codes.Code
		msg         string
		wantStopped bool
	}{
		{name: "runtime honours TARGET"},
		{
			name:  "runtime ignores TARGET",
			setup: func(f *targetFakeRuntime) { f.ignoreTarget = true },
			code:  codes.Internal, msg: "the runtime did not honour TARGET", wantStopped: true,
		},
		{
			name:  "process gone before verification",
			setup: func(f *targetFakeRuntime) { f.ignoreTarget, f.exitAtStart = true, true },
		},
		{
			name:    "target died after create",
			between: func(f *targetFakeRuntime) { f.setState("app", runtimeapi.ContainerState_CONTAINER_EXITED) },
			code:    codes.FailedPrecondition, msg: "not running",
		},
		{
			name: "annotation damaged",
			between: func(f *targetFakeRuntime) {
				f.mu.Lock()
				f.containers["ctr1"].annotations[PIDTargetAnnotation] = "{"
				f.mu.Unlock()
			},
			code: codes.FailedPrecondition, msg: "recreate the container",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTargetFake()
			f.add("app", "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
			if tt.setup != nil {
				tt.setup(f)
			}
			s := startTargetShim(t, f, "native")
			id := created(t, s, "pod1", "app")
			if tt.between != nil {
				tt.between(f)
			}
			_, err := s.target.start(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id})
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("StartContainer: %v; want %s with %q", err, tt.code, tt.msg)
			}
			if stopped := len(f.stopped) == 1 && f.stopped[0] == id; stopped != tt.wantStopped {
				t.Errorf("stopped %v, want the debug container stopped: %v", f.stopped, tt.wantStopped)
			}
		})
	}
}

func TestStartContainerWithoutTarget(t *testing.T) {
	f := newTargetFake()
	s := startTargetShim(t, f, "native")
	resp, err := s.target.create(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: "pod1", Config: &runtimeapi.ContainerConfig{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.target.start(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: resp.GetContainerId()}); err != nil {
		t.Errorf("plain StartContainer: %v", err)
	}
	// An unknown container gets the runtime's own answer.
	_, err = s.target.start(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: "nosuch"})
	if status.Code(err) != codes.NotFound || status.Convert(err).Message() != `container "nosuch" not found` {
		t.Errorf("StartContainer of an unknown container: %v; want the runtime's NotFound", err)
	}
}

func TestInterceptedMethodsRegister(t *testing.T) {
	f := newTargetFake()
	s := startTargetShim(t, f, "auto")
	if _, err := proxy.NewServer(s.backend, proxy.ServerOptions{Intercept: s.Intercepted(), Services: s.Services()}); err != nil {
		t.Fatal(err)
	}
}

func TestStatusReportsPIDTargetMode(t *testing.T) {
	tests := []struct {
		mode, runtime, effective, reason string
	}{
		{"auto", "containerd 1.6.20", "native", "containerd 1.6.20 honours TARGET (since 1.5)"},
		{"auto", "containerd 1.4.0", "reject", "--containerd-address is empty"},
		{"native", "cri-o 1.30", "native", "configured"},
		// Not in the table: given TARGET and judged by what it does.
		{"auto", "cri-o 1.34.0", "native", "cri-o 1.34.0 is not known to ignore TARGET: it is passed to the runtime and verified after start"},
		{"auto", "containerd dev", "native", "verified after start"},
		{"emulate", "containerd 1.6.20", "reject", "--containerd-address is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.mode+" "+tt.runtime, func(t *testing.T) {
			f := newTargetFake()
			f.name, f.version, _ = strings.Cut(tt.runtime, " ")
			s := startTargetShim(t, f, tt.mode)
			modes := s.modes(context.Background())
			if len(modes) == 0 {
				t.Fatalf("modes %v", modes)
			}
			m := modes[0] // pid-target comes first; other features follow
			if m.GetFeature() != "pid-target" || m.GetConfigured() != tt.mode || m.GetEffective() != tt.effective || !strings.Contains(m.GetReason(), tt.reason) {
				t.Errorf("mode %+v; want configured %s, effective %s, reason with %q", m, tt.mode, tt.effective, tt.reason)
			}
		})
	}
}

func TestHonoursTargetLookup(t *testing.T) {
	tests := []struct {
		name, version string
		want          support
	}{
		{"containerd", "1.5.0", supportHonours},
		{"containerd", "v1.6.20", supportHonours},
		{"containerd", "1.6.20~ds1", supportHonours},
		{"containerd", "2.0.0-rc.1", supportHonours},
		{"containerd", "1.4.13", supportIgnores},
		{"containerd", "0.9", supportIgnores},
		{"containerd", "dev", supportUnknown},
		{"cri-o", "1.30.0", supportUnknown},
		{"", "", supportUnknown},
	}
	for _, tt := range tests {
		if got, why := honoursTarget.lookup("TARGET", tt.name, tt.version); got != tt.want || why == "" {
			t.Errorf("lookup(%q, %q) = %v, %q; want %v", tt.name, tt.version, got, why, tt.want)
		}
	}
}

func TestSetPIDNamespacePath(t *testing.T) {
	spec := `{"ociVersion":"1.0.2","fromTheFuture":{"x":1},"linux":{"cgroupsPath":"/a","namespaces":[{"type":"network","path":"/var/run/netns/x"},{"type":"pid"},{"type":"mount"}]}}`
	out, err := setPIDNamespacePath([]byte(spec), "/proc/42/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		FromTheFuture map[string]int `json:"fromTheFuture"`
		Linux         struct {
			CgroupsPath string `json:"cgroupsPath"`
			Namespaces  []struct {
				Type string `json:"type"`
				Path string `json:"path"`
			} `json:"namespaces"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if got.FromTheFuture["x"] != 1 || got.Linux.CgroupsPath != "/a" || len(got.Linux.Namespaces) != 3 {
		t.Errorf("spec lost fields: %s", out)
	}
	for _, ns := range got.Linux.Namespaces {
		want := map[string]string{"network": "/var/run/netns/x", "pid": "/proc/42/ns/pid", "mount": ""}[ns.Type]
		if ns.Path != want {
			t.Errorf("namespace %s path %q, want %q", ns.Type, ns.Path, want)
		}
	}
	for _, bad := range []string{`{"linux":{"namespaces":[{"type":"mount"}]}}`, `{}`, `[`} {
		if _, err := setPIDNamespacePath([]byte(bad), "/proc/42/ns/pid"); err == nil {
			t.Errorf("spec %s: no error", bad)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]string{"": "auto", "auto": "auto", "native": "native", "emulate": "emulate", "reject": "", "Native": ""} {
		got, err := ParseMode(in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestStartContainerWithTargetEmulated: in emulate mode the created
// container's spec is pointed at the target's PID namespace through the
// containerd API (only the spec field written) between create and start,
// and the started container is verified to be there.
func TestStartContainerWithTargetEmulated(t *testing.T) {
	tests := []struct {
		name  string
		spec  string // of the created container, before the join; empty: the fake's
		calls []string
		code  codes.Code
		msg   string
	}{
		{name: "joined", calls: []string{"spec ctr1"}},
		{
			name: "a spec without a PID namespace", spec: `{"linux":{"namespaces":[{"type":"mount"}]}}`,
			code: codes.FailedPrecondition, msg: "no pid entry in linux.namespaces",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTargetFake()
			f.add("app", "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
			s := New(serveFakeRuntime(t, f), Options{PIDTargetMode: PIDTargetEmulate, Containerd: f.containerd()})
			s.target.pidNamespace = f.pidNamespace
			id := created(t, s, "pod1", "app")
			if got := f.creates[0].GetConfig().GetLinux().GetSecurityContext().GetNamespaceOptions().GetPid(); got != runtimeapi.NamespaceMode_CONTAINER {
				t.Fatalf("forwarded pid mode %s, want CONTAINER (the runtime's own namespace, swapped before start)", got)
			}
			if tt.spec != "" {
				f.mu.Lock()
				f.containers[id].spec = []byte(tt.spec)
				f.mu.Unlock()
			}
			_, err := s.target.start(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id})
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("StartContainer: %v; want %s with %q", err, tt.code, tt.msg)
			}
			if got := f.containerdCalls(); !slices.Equal(got, tt.calls) {
				t.Errorf("containerd calls %q, want %q", got, tt.calls)
			}
			if err != nil {
				return
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			app, debug := f.containers["app"], f.containers[id]
			if f.pidNS[debug.pid] != f.pidNS[app.pid] {
				t.Errorf("the debug container runs in PID namespace %d, the target in %d", f.pidNS[debug.pid], f.pidNS[app.pid])
			}
			if owner, ok := specPIDNamespaceOwner(debug.spec); !ok || owner != app.pid || !strings.Contains(string(debug.spec), `"future":{"x":1}`) {
				t.Errorf("spec after the join: %s", debug.spec)
			}
		})
	}
}
