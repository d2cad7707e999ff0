package shim

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/allowlist"
	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/caller"
	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/podspec"
)

// fakeKinds plays the API server: what each container of pod shop/web is.
type fakeKinds struct {
	mu    sync.Mutex
	kinds map[string]podspec.Kind
	err   error
	asked int
}

func (f *fakeKinds) Kind(_ context.Context, namespace, name, uid, container string) (podspec.Kind, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	if f.err != nil {
		return podspec.Unknown, f.err
	}
	if namespace != "shop" || name != "web" || uid != "u1" {
		return podspec.Unknown, errors.New("no such pod")
	}
	return f.kinds[container], nil
}

// kubeletRequest is a CreateContainer as the kubelet sends it for a
// container of pod shop/web: its labels, annotations, the image ID.
func kubeletRequest(name, image string) *runtimeapi.CreateContainerRequest {
	return &runtimeapi.CreateContainerRequest{
		PodSandboxId: "pod1",
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name},
			Image:    &runtimeapi.ImageSpec{Image: image},
			Labels: map[string]string{labelPodNamespace: "shop", labelPodName: "web", labelPodUID: "u1",
				labelContainerName: name},
			Annotations: map[string]string{"io.kubernetes.container.restartCount": "0"},
		},
		SandboxConfig: &runtimeapi.PodSandboxConfig{
			Metadata:    &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "shop", Uid: "u1"},
			Annotations: map[string]string{annotationPodConfigSource: "api"},
		},
	}
}

// TestEphemeralContainersAreDebugContainers: an ephemeral container the
// kubelet creates without TARGET is judged by the allowlist; its pod's
// regular containers are not, and the API server is asked only when the
// kubelet's annotations cannot rule a container out.
func TestEphemeralContainersAreDebugContainers(t *testing.T) {
	kinds := map[string]podspec.Kind{"app": podspec.Regular, "debugger": podspec.Ephemeral}
	tests := []struct {
		name   string
		req    *runtimeapi.CreateContainerRequest
		allow  string // "" : no allowlist
		kinds  *fakeKinds
		others bool            // --debug-image-allowlist-other-callers
		caller *caller.Process // who creates it (nil: unknown)
		code   codes.Code
		asked  int    // API server lookups
		lookup string // the lookup result counted, if any
	}{
		{name: "ephemeral, image off the list", req: kubeletRequest("debugger", "sha256:busyboxid"), allow: "registry.corp/debug/*",
			kinds: &fakeKinds{kinds: kinds}, code: codes.PermissionDenied, asked: 1, lookup: "ephemeral"},
		{name: "ephemeral, image on the list", req: kubeletRequest("debugger", "sha256:debugimageid"), allow: "registry.corp/debug/*",
			kinds: &fakeKinds{kinds: kinds}, code: codes.OK, asked: 1, lookup: "ephemeral"},
		{name: "regular container, any image", req: kubeletRequest("app", "sha256:busyboxid"), allow: "registry.corp/debug/*",
			kinds: &fakeKinds{kinds: kinds}, code: codes.OK, asked: 1, lookup: "regular"},
		{name: "no allowlist, no audit: nothing asked", req: kubeletRequest("debugger", "sha256:busyboxid"),
			kinds: &fakeKinds{kinds: kinds}, code: codes.OK},
		{name: "API server unreachable: not judged", req: kubeletRequest("debugger", "sha256:busyboxid"), allow: "registry.corp/debug/*",
			kinds: &fakeKinds{err: errors.New("connection refused")}, code: codes.OK, asked: 1, lookup: "unknown"},
		{name: "no API server: not judged", req: kubeletRequest("debugger", "sha256:busyboxid"), allow: "registry.corp/debug/*",
			code: codes.OK, lookup: "unknown"},
		{name: "ports: a regular container", req: with(kubeletRequest("debugger", "sha256:busyboxid"), func(r *runtimeapi.CreateContainerRequest) {
			r.Config.Annotations[annotationContainerPorts] = `[{"containerPort":80}]`
		}), allow: "registry.corp/debug/*", kinds: &fakeKinds{kinds: kinds}, code: codes.OK, lookup: "regular"},
		{name: "preStop: a regular container", req: with(kubeletRequest("debugger", "sha256:busyboxid"), func(r *runtimeapi.CreateContainerRequest) {
			r.Config.Annotations[annotationContainerPreStop] = `{"exec":{"command":["true"]}}`
		}), allow: "registry.corp/debug/*", kinds: &fakeKinds{kinds: kinds}, code: codes.OK, lookup: "regular"},
		{name: "static pod: no ephemeral containers", req: with(kubeletRequest("debugger", "sha256:busyboxid"), func(r *runtimeapi.CreateContainerRequest) {
			r.SandboxConfig.Annotations[annotationPodConfigSource] = "file"
		}), allow: "registry.corp/debug/*", kinds: &fakeKinds{kinds: kinds}, code: codes.OK, lookup: "regular"},
		{name: "not the kubelet's: no pod to ask", req: with(kubeletRequest("debugger", "sha256:busyboxid"), func(r *runtimeapi.CreateContainerRequest) {
			r.Config.Labels = nil
		}), allow: "registry.corp/debug/*", kinds: &fakeKinds{kinds: kinds}, code: codes.OK},
		{name: "other callers judged: crictl's container, image off the list", req: with(kubeletRequest("debugger", "sha256:busyboxid"), func(r *runtimeapi.CreateContainerRequest) {
			r.Config.Labels = nil
		}), allow: "registry.corp/debug/*", others: true, caller: &caller.Process{Exe: "/usr/bin/crictl"}, code: codes.PermissionDenied},
		{name: "other callers judged: an unidentified caller counts as one", req: with(kubeletRequest("app", "sha256:busyboxid"), func(r *runtimeapi.CreateContainerRequest) {
			r.Config.Labels = nil
		}), allow: "registry.corp/debug/*", others: true, code: codes.PermissionDenied},
		{name: "other callers judged: the kubelet's regular container is not", req: kubeletRequest("app", "sha256:busyboxid"), allow: "registry.corp/debug/*",
			kinds: &fakeKinds{kinds: kinds}, others: true, caller: &caller.Process{Exe: "/usr/bin/kubelet", Kubelet: true}, code: codes.OK, asked: 1, lookup: "regular"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			policy, err := allowlist.New(tt.allow, "")
			if err != nil {
				t.Fatal(err)
			}
			f := newTargetFake()
			reg := prometheus.NewRegistry()
			m := metrics.NewDebugImages(reg)
			opts := Options{DebugImages: policy, DebugImageMetrics: m, DebugOtherCallers: tt.others}
			if tt.kinds != nil {
				opts.Pods = tt.kinds
			}
			s := New(serveFakeRuntimeAndImages(t, f, newFakeImages()), opts)
			ctx := context.Background()
			if tt.caller != nil {
				ctx = caller.NewContext(ctx, tt.caller)
			}
			_, err = s.createContainer(ctx, tt.req)
			if status.Code(err) != tt.code {
				t.Fatalf("CreateContainer: %v; want %s", err, tt.code)
			}
			if tt.code == codes.PermissionDenied {
				if !strings.Contains(err.Error(), "not allowed for debug containers") || len(f.creates) != 0 {
					t.Errorf("refusal %v, %d creates; want the allowlist's refusal and nothing created", err, len(f.creates))
				}
			}
			if tt.kinds != nil && tt.kinds.asked != tt.asked {
				t.Errorf("the API server was asked %d times, want %d", tt.kinds.asked, tt.asked)
			}
			want := ""
			if tt.lookup != "" {
				want = `crishim_debug_container_lookups_total{result="` + tt.lookup + `"} 1` + "\n"
			}
			got := ""
			if n, err := testutil.GatherAndCount(reg, "crishim_debug_container_lookups_total"); err != nil {
				t.Fatal(err)
			} else if n > 0 {
				got = grepMetric(t, reg, "crishim_debug_container_lookups_total")
			}
			if got != want {
				t.Errorf("lookups counted:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestEphemeralContainerAudited: with the audit log on and no allowlist, an
// ephemeral container without TARGET is a debugContainer session; a
// regular container is not.
func TestEphemeralContainerAudited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := audit.Open(audit.Config{Path: path}, metrics.NewAudit(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	f := newTargetFake()
	s := New(serveFakeRuntimeAndImages(t, f, newFakeImages()), Options{Audit: l,
		Pods: &fakeKinds{kinds: map[string]podspec.Kind{"app": podspec.Regular, "debugger": podspec.Ephemeral}}})
	for _, name := range []string{"app", "debugger"} {
		if _, err := s.createContainer(context.Background(), kubeletRequest(name, "sha256:busyboxid")); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"kind":"debugContainer"`) || !strings.Contains(lines[0], `"containerName":"debugger"`) ||
		!strings.Contains(lines[1], `"stage":"ended"`) || !strings.Contains(lines[1], `"containerID":"ctr2"`) {
		t.Errorf("audit log; want the debugger's create started and ended, nothing for app:\n%s", b)
	}
}

func with(r *runtimeapi.CreateContainerRequest, change func(*runtimeapi.CreateContainerRequest)) *runtimeapi.CreateContainerRequest {
	change(r)
	return r
}

// grepMetric is the sample lines of name as the registry exposes them.
func grepMetric(t *testing.T, reg prometheus.Gatherer, name string) string {
	t.Helper()
	var out strings.Builder
	text, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, name)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(l, name+"{") {
			out.WriteString(l + "\n")
		}
	}
	return out.String()
}
