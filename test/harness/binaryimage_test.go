package harness

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// TestBinaryImageArchive: the archive is an OCI layout whose one manifest, named ref, has
// the binary as its layer and entrypoint.
func TestBinaryImageArchive(t *testing.T) {
	data, err := BinaryImageArchive("localhost/x/y:latest", "/tmp/bin/prog", []byte("\x7fELF..."))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != "localhost/x/y:latest" {
		t.Fatalf("index %s: %v", files["index.json"], err)
	}
	var man struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(index.Manifests[0].Digest, "sha256:")], &man); err != nil || len(man.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	cfg := string(files["blobs/sha256/"+strings.TrimPrefix(man.Config.Digest, "sha256:")])
	if !strings.Contains(cfg, `"Entrypoint":["/prog"]`) {
		t.Errorf("config %s", cfg)
	}
	layer := tar.NewReader(bytes.NewReader(files["blobs/sha256/"+strings.TrimPrefix(man.Layers[0].Digest, "sha256:")]))
	h, err := layer.Next()
	if err != nil || h.Name != "prog" || h.Mode != 0o755 {
		t.Errorf("layer entry %+v, %v", h, err)
	}
}
