package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestSplitRef(t *testing.T) {
	for _, tc := range []struct {
		ref, repo, tag string
		wantErr        bool
	}{
		{ref: "registry.k8s.io/e2e-test-images/busybox:1.29-2", repo: "e2e-test-images/busybox", tag: "1.29-2"},
		{ref: "gcr.io/k8s-staging-cri-tools/test-image-latest", repo: "k8s-staging-cri-tools/test-image-latest", tag: "latest"},
		{ref: "localhost:5000/a/b", repo: "a/b", tag: "latest"},
		{ref: "busybox:1.29", wantErr: true},
		{ref: "gcr.io/x/y@sha256:9700f9a2f5bf2c45f2f605a0bd3bce7cf37420ec9d3ed50ac2758413308766bf", wantErr: true},
	} {
		repo, tag, err := splitRef(tc.ref)
		if (err != nil) != tc.wantErr || repo != tc.repo || tag != tc.tag {
			t.Errorf("splitRef(%q) = %q, %q, %v; want %q, %q, error %v", tc.ref, repo, tag, err, tc.repo, tc.tag, tc.wantErr)
		}
	}
}

// TestRegistryServesImages pulls as a runtime does: the manifest by tag (HEAD for its digest,
// then GET by digest), then every blob it names, each checked against its digest; the same
// path under two registry hosts is one image, and different files make different images.
func TestRegistryServesImages(t *testing.T) {
	if _, err := os.Stat(busyboxPath); err != nil {
		t.Skip("no static busybox:", err)
	}
	reg, err := ServeRegistry(context.Background(), []RegistryImage{
		{Ref: "registry.k8s.io/pause:3.9", Files: []ImageFile{{Path: "/a"}}},
		{Ref: "k8s.gcr.io/pause:3.9", Files: []ImageFile{{Path: "/a"}}},
		{Ref: "gcr.io/x/other", Files: []ImageFile{{Path: "/b/c", Mode: 0o4755, Data: "x"}}, User: "1000"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	if got := reg.Mirrors(); len(got) != 3 || got["gcr.io"] != "http://"+reg.Addr {
		t.Errorf("Mirrors() = %v", got)
	}
	get := func(method, path string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+reg.Addr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	digestOf := func(b []byte) string {
		sum := sha256.Sum256(b)
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	manifestDigest := func(path string) string {
		t.Helper()
		resp, _ := get(http.MethodHead, path+"?ns=registry.k8s.io")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("HEAD %s: %s", path, resp.Status)
		}
		return resp.Header.Get("Docker-Content-Digest")
	}
	pause := manifestDigest("/v2/pause/manifests/3.9")
	other := manifestDigest("/v2/x/other/manifests/latest")
	if pause == other {
		t.Errorf("two images with different files share manifest %s", pause)
	}
	resp, man := get(http.MethodGet, "/v2/pause/manifests/"+pause)
	if resp.StatusCode != http.StatusOK || digestOf(man) != pause || resp.Header.Get("Content-Type") != mediaTypeManifest {
		t.Fatalf("GET manifest by digest: %s, digest %s, type %q", resp.Status, digestOf(man), resp.Header.Get("Content-Type"))
	}
	var m struct {
		Config descriptor
		Layers []descriptor
	}
	if err := json.Unmarshal(man, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 2 {
		t.Errorf("layers = %d, want busybox and the files", len(m.Layers))
	}
	for _, d := range append(m.Layers, m.Config) {
		resp, b := get(http.MethodGet, "/v2/pause/blobs/"+d.Digest)
		if resp.StatusCode != http.StatusOK || digestOf(b) != d.Digest || int64(len(b)) != d.Size {
			t.Errorf("blob %s: %s, %d bytes, digest %s", d.Digest, resp.Status, len(b), digestOf(b))
		}
	}
	for _, path := range []string{"/v2/pause/manifests/3.8", "/v2/pause/blobs/sha256:00", "/v2/nothing"} {
		if resp, _ := get(http.MethodGet, path); resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %s, want 404", path, resp.Status)
		}
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
