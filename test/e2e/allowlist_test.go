package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
)

// TestDebugImageAllowlist: crishim refuses a debug container (PID namespace
// TARGET) whose image the allowlist does not name, before the runtime sees
// anything, however the image is named; and allows one whose tag resolves
// to an allowed digest in the runtime.
func TestDebugImageAllowlist(t *testing.T) {
	ctx := context.Background()
	direct, images := criClients(t, testbed.Endpoint)
	repoDigest := pinBusybox(t)
	var img *runtimeapi.ImageStatusResponse
	eventually(t, "the runtime's CRI lists the pinned name as a repo digest", func() error {
		var err error
		img, err = images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: testbed.BusyboxImage}, false)
		if err != nil {
			return err
		}
		if !slices.Contains(img.GetImage().GetRepoDigests(), repoDigest) {
			return fmt.Errorf("repo digests %v", img.GetImage().GetRepoDigests())
		}
		return nil
	})
	imageID := img.GetImage().GetId()

	t.Run("refused", func(t *testing.T) {
		p := startCrishim(t, testbed.Endpoint, "--debug-image-allowlist", "registry.corp.example/debug/*")
		rs, _ := criClients(t, p.Endpoint)
		podID, pod, appID := podWithApp(t, rs, "allowlist-refused")
		// As kubectl debug's kubelet sends it (the image ID, the pod spec's
		// name beside it), and as a name.
		for _, spec := range []*runtimeapi.ImageSpec{
			{Image: imageID, UserSpecifiedImage: "busybox:crishim-test"},
			{Image: testbed.BusyboxImage},
		} {
			before := containerIDs(t, direct)
			cfg := debugConfig("dbg", appID, "exec sleep 3601")
			cfg.Image = spec
			_, err := rs.CreateContainer(ctx, podID, cfg, pod)
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "--debug-image-allowlist") ||
				!strings.Contains(err.Error(), spec.Image) {
				t.Fatalf("CreateContainer of %s: %v; want PermissionDenied naming the image and --debug-image-allowlist", spec.Image, err)
			}
			if after := containerIDs(t, direct); len(after) != len(before) {
				t.Errorf("the runtime has %d containers after the refusal, %d before", len(after), len(before))
			}
		}
		// crishimctl debug creates through crishim: the same refusal.
		if out, err := crishimctl(t, p.Endpoint, "debug", "--target", appID, "--", "true"); err == nil || !strings.Contains(out, "PermissionDenied") {
			t.Errorf("crishimctl debug with the target's (refused) image: %v\n%s", err, out)
		}
		// An ordinary container is no debug container: not checked.
		startContainer(t, rs, podID, pod, containerConfig("plain", "exec sleep 3600", nil))
		if m := metricsText(t, p.Metrics); !strings.Contains(m, `crishim_debug_image_checks_total{result="refused"} 3`) {
			t.Errorf("refusals not counted:\n%s", grepLines(m, "crishim_debug_image"))
		}
	})

	// N5: a name that says one image while the runtime runs another is
	// judged by the image the runtime runs.
	t.Run("names that say one image and run another", func(t *testing.T) {
		pause, err := images.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: testbed.PauseImage}, false)
		if err != nil || pause.GetImage() == nil {
			t.Fatalf("ImageStatus %s: %v, %v", testbed.PauseImage, pause, err)
		}
		pauseID := strings.TrimPrefix(pause.GetImage().GetId(), "sha256:")
		refused := func(allow, image string) {
			t.Helper()
			p := startCrishim(t, testbed.Endpoint, "--debug-image-allowlist", allow)
			rs, _ := criClients(t, p.Endpoint)
			podID, pod, appID := podWithApp(t, rs, "allowlist-names")
			before := containerIDs(t, direct)
			cfg := debugConfig("dbg", appID, "exec sleep 3601")
			cfg.Image = &runtimeapi.ImageSpec{Image: image}
			_, err := rs.CreateContainer(ctx, podID, cfg, pod)
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), image) {
				t.Errorf("allowlist %s, CreateContainer of %s: %v; want PermissionDenied naming the image", allow, image, err)
			}
			if after := containerIDs(t, direct); len(after) != len(before) {
				t.Errorf("allowlist %s, image %s: the runtime has %d containers after the refusal, %d before", allow, image, len(after), len(before))
			}
		}
		// A short ID prefix parses as docker.io/library/<hex>:latest, and
		// the runtime runs the image it prefixes (the pause image).
		refused("docker.io/library/*", pauseID[:12])
		if testbed.ContainerdAddress == "" {
			return
		}
		// containerd drops the tag of repo:tag@digest and runs the image
		// named repo@digest: here the pause image, named as a busybox
		// digest as a pull by digest would name it.
		digest := nameImageAs(t, testbed.PauseImage, "docker.io/library/busybox@")
		refused(testbed.BusyboxImage, testbed.BusyboxImage+"@"+digest)
	})

	// Without TARGET only the pod's spec says a kubelet container is
	// ephemeral; without an API server (no --kubeconfig) crishim cannot
	// tell, creates it unjudged and counts it unknown (test/kube proves the
	// judged case on a real node).
	t.Run("no TARGET and no API server: not judged", func(t *testing.T) {
		p := startCrishim(t, testbed.Endpoint, "--debug-image-allowlist", "registry.corp.example/debug/*")
		rs, _ := criClients(t, p.Endpoint)
		podID, pod, _ := podWithApp(t, rs, "allowlist-notarget")
		cfg := containerConfig("dbg", "exec sleep 3601", map[string]string{
			"io.kubernetes.pod.namespace": pod.Metadata.Namespace, "io.kubernetes.pod.name": pod.Metadata.Name,
			"io.kubernetes.pod.uid": pod.Metadata.Uid, "io.kubernetes.container.name": "dbg"})
		cfg.Image = &runtimeapi.ImageSpec{Image: imageID, UserSpecifiedImage: testbed.BusyboxImage}
		if _, err := rs.CreateContainer(ctx, podID, cfg, pod); err != nil {
			t.Errorf("CreateContainer of a kubelet container without TARGET and no API server: %v", err)
		}
		if m := metricsText(t, p.Metrics); !strings.Contains(m, `crishim_debug_container_lookups_total{result="unknown"} 1`) {
			t.Errorf("lookups not counted unknown:\n%s", grepLines(m, "crishim_debug_container"))
		}
	})

	t.Run("image ID resolved to an allowed tag", func(t *testing.T) {
		p := startCrishim(t, testbed.Endpoint, "--debug-image-allowlist", testbed.BusyboxImage)
		rs, _ := criClients(t, p.Endpoint)
		podID, pod, appID := podWithApp(t, rs, "allowlist-tag")
		cfg := debugConfig("dbg", appID, "exec sleep 3601")
		cfg.Image = &runtimeapi.ImageSpec{Image: imageID, UserSpecifiedImage: testbed.BusyboxImage}
		if _, err := rs.CreateContainer(ctx, podID, cfg, pod); err != nil {
			t.Errorf("CreateContainer of %s (tagged %s): %v", imageID, testbed.BusyboxImage, err)
		}
	})

	t.Run("tag resolved to an allowed digest", func(t *testing.T) {
		p := startCrishim(t, testbed.Endpoint, "--debug-image-allowlist", "registry.corp.example/debug/*,"+repoDigest)
		rs, _ := criClients(t, p.Endpoint)
		podID, pod, appID := podWithApp(t, rs, "allowlist-allowed")
		for i, spec := range []*runtimeapi.ImageSpec{{Image: testbed.BusyboxImage}, {Image: imageID}} {
			cfg := debugConfig("dbg"+string(rune('a'+i)), appID, "exec sleep 3601")
			cfg.Image = spec
			if _, err := rs.CreateContainer(ctx, podID, cfg, pod); err != nil {
				t.Errorf("CreateContainer of %s (resolves to %s): %v", spec.Image, repoDigest, err)
			}
		}
	})
}

// pinBusybox gives the harness's busybox a digest name as a registry pull
// would, and returns it. CRI-O names an image by its manifest digest by itself,
// and its CRI ImageStatus lists that name among the repo digests; containerd's
// CRI lists only names the image store has, so there the name is made through
// the containerd API.
func pinBusybox(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	_, cri := criClients(t, testbed.Endpoint)
	st, err := cri.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: testbed.BusyboxImage}, false)
	if err != nil {
		t.Fatal(err)
	}
	const repo = "docker.io/library/busybox@"
	for _, d := range st.GetImage().GetRepoDigests() {
		if strings.HasPrefix(d, repo) {
			return d
		}
	}
	if testbed.ContainerdAddress == "" {
		t.Fatalf("%s %s lists no repo digest %s... of %s (%v), and has no containerd API to make one",
			testbed.RuntimeName, testbed.RuntimeVersion, repo, testbed.BusyboxImage, st.GetImage().GetRepoDigests())
	}
	c, err := client.New(testbed.ContainerdAddress, client.WithDefaultNamespace("k8s.io"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	is := c.ImageService()
	img, err := is.Get(ctx, testbed.BusyboxImage)
	if err != nil {
		t.Fatal(err)
	}
	name := repo + img.Target.Digest.String()
	if _, err := is.Create(ctx, images.Image{Name: name, Target: img.Target}); err != nil && !errdefs.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// nameImageAs gives image a second name, repo plus its manifest digest, in
// containerd's image store (removed when the test ends), and returns the
// digest.
func nameImageAs(t *testing.T, image, repo string) string {
	t.Helper()
	ctx := context.Background()
	c, err := client.New(testbed.ContainerdAddress, client.WithDefaultNamespace("k8s.io"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	is := c.ImageService()
	img, err := is.Get(ctx, image)
	if err != nil {
		t.Fatal(err)
	}
	name := repo + img.Target.Digest.String()
	if _, err := is.Create(ctx, images.Image{Name: name, Target: img.Target}); err != nil && !errdefs.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = is.Delete(context.Background(), name) })
	return img.Target.Digest.String()
}

// grepLines keeps the lines of s containing sub, for readable failures.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestDebugImageAllowlistOtherCallers: with --debug-image-allowlist-other-callers, a container
// a caller other than the kubelet creates (this test, as crictl would) is a debug container:
// off the list it is refused before the runtime sees it, and its create is audited with its
// caller.
func TestDebugImageAllowlistOtherCallers(t *testing.T) {
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	p := startCrishim(t, testbed.Endpoint, "--debug-image-allowlist", "registry.corp.example/debug/*",
		"--debug-image-allowlist-other-callers", "--audit-log", auditPath)
	rs, _ := criClients(t, p.Endpoint)
	pod := podConfig(t, uniqueName("other-callers"), nil)
	podID := runPod(t, rs, pod)
	_, err := rs.CreateContainer(context.Background(), podID, containerConfig("by-hand", appScript, nil), pod)
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a container created by hand with %s off the list: %v; want PermissionDenied", testbed.BusyboxImage, err)
	}
	ev := auditEvent(t, auditPath, "the refused create's ended event", func(ev audit.Event) bool {
		return ev.Kind == audit.KindDebug && ev.Stage == audit.StageEnded
	})
	if ev.Code != codes.PermissionDenied.String() || ev.Caller == nil || ev.Caller.Kubelet || ev.Caller.PID != int32(os.Getpid()) {
		t.Errorf("ended event %+v (caller %+v); want PermissionDenied and this test as the caller", ev, ev.Caller)
	}
}
