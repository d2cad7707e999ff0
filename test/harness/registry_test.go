package harness

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestRegistryTag(t *testing.T) {
	for _, tc := range []struct {
		ref, host, repo, tag string
		wantErr              bool
	}{
		{ref: "registry.k8s.io/e2e-test-images/busybox:1.29-2", host: "registry.k8s.io", repo: "e2e-test-images/busybox", tag: "1.29-2"},
		{ref: "gcr.io/k8s-staging-cri-tools/test-image-latest", host: "gcr.io", repo: "k8s-staging-cri-tools/test-image-latest", tag: "latest"},
		{ref: "localhost:5000/a/b", host: "localhost:5000", repo: "a/b", tag: "latest"},
		{ref: "busybox:1.29", wantErr: true},
		{ref: "gcr.io/x/y@sha256:9700f9a2f5bf2c45f2f605a0bd3bce7cf37420ec9d3ed50ac2758413308766bf", wantErr: true},
	} {
		ref, host, err := registryTag(tc.ref)
		if (err != nil) != tc.wantErr || host != tc.host || err == nil && (ref.RepositoryStr() != tc.repo || ref.TagStr() != tc.tag) {
			t.Errorf("registryTag(%q) = %v, %q, %v; want %q, %q, %q, error %v", tc.ref, ref, host, err, tc.host, tc.repo, tc.tag, tc.wantErr)
		}
	}
}

// TestRegistryServesImages pulls with go-containerregistry's client, as a runtime does through
// a mirror (by repository path and tag on the registry's address): every image validates, in
// the media types the runtimes pull and with the config asked for; the same content under two
// names is one manifest (pause:3.9 is pulled from two registries), and different files make
// different images.
func TestRegistryServesImages(t *testing.T) {
	if _, err := os.Stat(busyboxPath); err != nil {
		t.Skip("no static busybox:", err)
	}
	reg, err := ServeRegistry(context.Background(), []RegistryImage{
		{Ref: "registry.k8s.io/pause:3.9", Files: []ImageFile{{Path: "/a"}}},
		{Ref: "k8s.gcr.io/pause:3.9", Files: []ImageFile{{Path: "/a"}}},
		{Ref: "gcr.io/x/same:1", Files: []ImageFile{{Path: "/a"}}},
		{Ref: "gcr.io/x/other", Files: []ImageFile{{Path: "/b/c", Mode: 0o4755, Data: "x"}}, User: "1000", Env: []string{"A=1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if got := reg.Mirrors(); len(got) != 3 || got["gcr.io"] != "http://"+reg.Addr || got["k8s.gcr.io"] != "http://"+reg.Addr {
		t.Errorf("Mirrors() = %v", got)
	}
	ref := func(path string) name.Reference {
		t.Helper()
		r, err := name.ParseReference(reg.Addr+path, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	pull := func(path string) v1.Image {
		t.Helper()
		img, err := remote.Image(ref(path))
		if err != nil {
			t.Fatalf("pull %s: %v", path, err)
		}
		// Fast, not reading layers: validate would gunzip them, and these are uncompressed
		// (TestPullThroughMirrors's runtime reads them).
		if err := validate.Image(img, validate.Fast); err != nil {
			t.Errorf("image %s: %v", path, err)
		}
		return img
	}
	digest := func(img v1.Image) v1.Hash {
		t.Helper()
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	pause, other := pull("/pause:3.9"), pull("/x/other:latest")
	if same := pull("/x/same:1"); digest(same) != digest(pause) {
		t.Errorf("same content, different manifests: %s and %s", digest(same), digest(pause))
	}
	if digest(pause) == digest(other) {
		t.Errorf("two images with different files share manifest %s", digest(pause))
	}

	man, err := other.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if man.MediaType != types.OCIManifestSchema1 || man.Config.MediaType != types.OCIConfigJSON || len(man.Layers) != 2 {
		t.Fatalf("manifest %s, config %s, %d layers; want OCI's, busybox and the files", man.MediaType, man.Config.MediaType, len(man.Layers))
	}
	for _, l := range man.Layers {
		if l.MediaType != types.OCIUncompressedLayer {
			t.Errorf("layer %s: %s, want %s", l.Digest, l.MediaType, types.OCIUncompressedLayer)
		}
	}
	cfg, err := other.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Config; c.User != "1000" || strings.Join(c.Env, " ") != imagePath+" A=1" || c.WorkingDir != "/" || cfg.OS != "linux" || !cfg.Created.Equal(imageEpoch) {
		t.Errorf("config = %+v", cfg)
	}
	if _, err := remote.Head(ref("/pause:3.8")); err == nil {
		t.Error("an unknown tag resolves")
	}
}

// TestPullThroughMirrors pulls from a Registry through Options.Mirrors, by tag and by the
// digest the pull reports, on the runtime RUNTIME names: containerd's hosts.toml files and
// CRI-O's registries.conf must both send the pulls to the loopback registry.
func TestPullThroughMirrors(t *testing.T) {
	requireRoot(t)
	ctx := testContext(t)
	const ref = "registry.k8s.io/mirrored/marker:1"
	reg, err := ServeRegistry(ctx, []RegistryImage{{Ref: ref, Files: []ImageFile{{Path: "/marker", Data: "m"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	c := startHarness(t, ctx, Options{Mirrors: reg.Mirrors()})
	t.Logf("pulling through %s %s", c.RuntimeName, c.RuntimeVersion)
	conn, err := c.Dial()
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer conn.Close()
	images := runtimeapi.NewImageServiceClient(conn)
	pulled, err := images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		t.Fatalf("PullImage %s: %v", ref, err)
	}
	st, err := images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil || st.GetImage() == nil {
		t.Fatalf("ImageStatus %s after pull (%s): %v, %v", ref, pulled.GetImageRef(), st, err)
	}
	var byDigest string
	for _, d := range st.GetImage().GetRepoDigests() {
		if strings.HasPrefix(d, "registry.k8s.io/mirrored/marker@sha256:") {
			byDigest = d
		}
	}
	if byDigest == "" {
		t.Fatalf("ImageStatus %s: no repo digest under its name: %v", ref, st.GetImage().GetRepoDigests())
	}
	if _, err := images.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: st.GetImage().GetId()}}); err != nil {
		t.Fatalf("RemoveImage: %v", err)
	}
	if _, err := images.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: byDigest}}); err != nil {
		t.Fatalf("PullImage %s: %v", byDigest, err)
	}
}
