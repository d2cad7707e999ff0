package shim

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/allowlist"
	"github.com/crishim/crishim/metrics"
)

const debugImageChecksHelp = "Debug container images checked against the allowlist (--debug-image-allowlist, --debug-image-allowlist-file), by result (allowed, refused, error: the runtime could not say what the image is)."

const (
	allowedDigest = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	otherDigest   = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	// evilDigest is the repo digest of an image pulled by digest alone:
	// docker.io/library/busybox@evilDigest, with no tag.
	evilDigest = "sha256:3333333333333333333333333333333333333333333333333333333333333333"
	evilID     = "sha256:d096327f76b3e0e4d3bd6cc2bdc6ef7bdcd4bd33ea54d4bb2c2c83b8d7a2e9f1"
)

// fakeImages answers ImageStatus from a table of image ID or name to the
// names the runtime knows the image by.
type fakeImages struct {
	runtimeapi.UnimplementedImageServiceServer
	images map[string]*runtimeapi.Image
	down   bool
}

func (f *fakeImages) ImageStatus(_ context.Context, in *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	if f.down {
		return nil, status.Error(codes.Unavailable, "image service down")
	}
	return &runtimeapi.ImageStatusResponse{Image: f.images[in.GetImage().GetImage()]}, nil
}

func newFakeImages() *fakeImages {
	debug := &runtimeapi.Image{Id: "sha256:debugimageid",
		RepoTags:    []string{"registry.corp/debug/tools:v1"},
		RepoDigests: []string{"registry.corp/debug/tools@" + allowedDigest}}
	busybox := &runtimeapi.Image{Id: "sha256:busyboxid",
		RepoTags:    []string{"docker.io/library/busybox:latest"},
		RepoDigests: []string{"docker.io/library/busybox@" + otherDigest}}
	// Two images the runtime resolves as containerd's LocalResolve does
	// (internal/cri/server/images/service.go): a name with both a tag and a
	// digest by its digest alone, a short ID prefix by the ID.
	pinned := &runtimeapi.Image{Id: "sha256:pinnedid",
		RepoDigests: []string{"docker.io/library/busybox@" + evilDigest}}
	tools := &runtimeapi.Image{Id: evilID,
		RepoTags: []string{"evil.example/tools:latest"}}
	return &fakeImages{images: map[string]*runtimeapi.Image{
		"sha256:debugimageid":          debug,
		"registry.corp/debug/tools:v1": debug,
		"sha256:busyboxid":             busybox,
		"busybox:latest":               busybox,
		"busybox:1.36@" + evilDigest:   pinned,
		"d096327f76b3":                 tools,
		evilID:                         tools,
	}}
}

func TestDebugImageAllowlist(t *testing.T) {
	tests := []struct {
		name     string
		allow    string
		image    string
		userSpec string
		code     codes.Code
		msg      []string
	}{
		{"no allowlist: anything", "", "sha256:busyboxid", "", codes.OK, nil},
		{"name as sent", "registry.corp/debug/*", "registry.corp/debug/tools:v1", "", codes.OK, nil},
		{"image ID resolved to an allowed tag", "registry.corp/debug/*", "sha256:debugimageid", "registry.corp/debug/tools:v1", codes.OK, nil},
		{"tag resolved to an allowed digest", "registry.corp/debug/tools@" + allowedDigest, "registry.corp/debug/tools:v1", "", codes.OK, nil},
		{"tag resolving to another digest", "docker.io/library/busybox@" + allowedDigest, "busybox:latest", "", codes.PermissionDenied,
			[]string{"busybox:latest", "--debug-image-allowlist", "config.image.image", "docker.io/library/busybox@" + otherDigest}},
		{"not allowed, named as the user wrote it", "registry.corp/debug/*", "sha256:busyboxid", "busybox", codes.PermissionDenied,
			[]string{"busybox (sha256:busyboxid)", "not allowed for debug containers", "--debug-image-allowlist"}},
		// user_specified_image is the client's word: it allows nothing.
		{"user_specified_image is not trusted", "busybox", "sha256:unknownid", "busybox", codes.PermissionDenied,
			[]string{"the runtime does not have it"}},
		{"unknown image", "registry.corp/debug/*", "registry.corp/other:1", "", codes.PermissionDenied,
			[]string{"registry.corp/other:1", "does not have it"}},
		{"no image", "busybox", "", "", codes.InvalidArgument, []string{"config.image.image: empty"}},
		// N5: the name is judged by what the runtime will run. A tag beside
		// a digest is ignored by the runtime; so it is by crishim.
		{"tag@digest runs the digest", "busybox:1.36", "busybox:1.36@" + evilDigest, "", codes.PermissionDenied,
			[]string{"busybox:1.36@" + evilDigest, "docker.io/library/busybox@" + evilDigest}},
		{"tag@digest of an allowed digest", "busybox@" + evilDigest, "busybox:1.36@" + evilDigest, "", codes.OK, nil},
		// A short image ID looks like a Docker Hub name; the runtime runs
		// the image it prefixes.
		{"short image ID prefix", "docker.io/library/*", "d096327f76b3", "", codes.PermissionDenied,
			[]string{"d096327f76b3", "evil.example/tools:latest"}},
		{"short image ID prefix of an allowed image", "evil.example/tools", "d096327f76b3", "", codes.OK, nil},
		// A name the runtime does not have is refused, even one the list
		// names: the create would fail anyway, and nothing was judged.
		{"allowed name the runtime lacks", "registry.corp/debug/*", "registry.corp/debug/absent:1", "", codes.PermissionDenied,
			[]string{"does not have it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTargetFake()
			f.add("app", "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
			policy, err := allowlist.New(tt.allow, "")
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			m := metrics.NewDebugImages(reg)
			s := New(serveFakeRuntimeAndImages(t, f, newFakeImages()), Options{PIDTargetMode: PIDTargetNative, DebugImages: policy, DebugImageMetrics: m})
			s.target.pidNamespace = f.pidNamespace
			req := targetRequest("pod1", "app")
			req.Config.Image = &runtimeapi.ImageSpec{Image: tt.image, UserSpecifiedImage: tt.userSpec}
			_, err = s.createContainer(context.Background(), req)
			if status.Code(err) != tt.code {
				t.Fatalf("CreateContainer: %v; want %s", err, tt.code)
			}
			for _, want := range tt.msg {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("message %q lacks %q", err, want)
				}
			}
			if tt.code != codes.OK && len(f.creates) != 0 {
				t.Errorf("the runtime got %d creates for a refused debug container", len(f.creates))
			}
			if tt.code == codes.PermissionDenied {
				want := `# HELP crishim_debug_image_checks_total ` + debugImageChecksHelp + `
# TYPE crishim_debug_image_checks_total counter
crishim_debug_image_checks_total{result="refused"} 1
`
				if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestDebugImageAllowlistOnlyTarget: containers that are not debug
// containers are never checked, and cost no ImageStatus.
func TestDebugImageAllowlistOnlyTarget(t *testing.T) {
	f := newTargetFake()
	images := &fakeImages{down: true}
	policy, err := allowlist.New("registry.corp/debug/*", "")
	if err != nil {
		t.Fatal(err)
	}
	s := New(serveFakeRuntimeAndImages(t, f, images), Options{DebugImages: policy})
	cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: "evil:1"}}
	if _, err := s.createContainer(context.Background(), &runtimeapi.CreateContainerRequest{PodSandboxId: "pod1", Config: cfg}); err != nil {
		t.Fatalf("CreateContainer of an ordinary container: %v", err)
	}
}

// TestDebugImageAllowlistRuntimeDown: a runtime that cannot say what the
// image is refuses with its own code, naming the field.
func TestDebugImageAllowlistRuntimeDown(t *testing.T) {
	f := newTargetFake()
	f.add("app", "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
	policy, err := allowlist.New("registry.corp/debug/*", "")
	if err != nil {
		t.Fatal(err)
	}
	s := New(serveFakeRuntimeAndImages(t, f, &fakeImages{down: true}), Options{PIDTargetMode: PIDTargetNative, DebugImages: policy})
	req := targetRequest("pod1", "app")
	req.Config.Image = &runtimeapi.ImageSpec{Image: "sha256:x"}
	_, err = s.createContainer(context.Background(), req)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "config.image.image") || len(f.creates) != 0 {
		t.Fatalf("CreateContainer with the image service down: %v (%d creates); want Unavailable naming config.image.image, nothing created", err, len(f.creates))
	}
}

// TestDebugImageAllowlistFileReload: a file edited under a running shim
// decides the next create.
func TestDebugImageAllowlistFileReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "allowlist")
	if err := os.WriteFile(file, []byte("registry.corp/debug/*\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	policy, err := allowlist.New("", file)
	if err != nil {
		t.Fatal(err)
	}
	f := newTargetFake()
	f.add("app", "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
	s := New(serveFakeRuntimeAndImages(t, f, newFakeImages()), Options{PIDTargetMode: PIDTargetNative, DebugImages: policy})
	s.target.pidNamespace = f.pidNamespace
	create := func() error {
		req := targetRequest("pod1", "app")
		req.Config.Image = &runtimeapi.ImageSpec{Image: "busybox:latest"}
		_, err := s.createContainer(context.Background(), req)
		return err
	}
	if err := create(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "--debug-image-allowlist-file "+file) {
		t.Fatalf("busybox before the reload: %v; want PermissionDenied naming the file flag", err)
	}
	if err := os.WriteFile(file, []byte("registry.corp/debug/*\nbusybox\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := policy.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := create(); err != nil {
		t.Fatalf("busybox after the reload: %v", err)
	}
}
