package harness

import (
	"archive/tar"
	"bytes"
	"fmt"
	"path"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// RegistryImage is an image a Registry serves: the host's busybox as its first layer (as in
// BusyboxImage), Files as a second layer when there are any, and the config fields given.
type RegistryImage struct {
	// Ref is the reference the image is pulled by, e.g.
	// "registry.k8s.io/e2e-test-images/busybox:1.29-2". The registry serves it under the
	// repository path and tag; the host only tells the runtime to ask this registry.
	Ref        string
	Entrypoint []string
	Cmd        []string
	Env        []string // PATH is always set
	User       string
	Labels     map[string]string
	Files      []ImageFile
}

// ImageFile is a file of an image's second layer; directories above it are created.
type ImageFile struct {
	Path string // absolute path in the image
	Mode int64  // permission bits, with setuid etc.; 0644 when 0
	Data string
}

// build is the image: base (the busybox layer every image shares) and Files as a second
// layer, both uncompressed (OCI media types, as the harness's imported images), and a config
// stamped with imageEpoch, so that an image's digest depends only on its content.
func (img RegistryImage) build(base v1.Layer) (v1.Image, error) {
	layers := []v1.Layer{base}
	if len(img.Files) > 0 {
		data, err := filesLayer(img.Files)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Ref, err)
		}
		layers = append(layers, static.NewLayer(data, types.OCIUncompressedLayer))
	}
	image, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layers...)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Ref, err)
	}
	cfg, err := image.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Ref, err)
	}
	cfg.Created = v1.Time{Time: imageEpoch}
	cfg.Architecture, cfg.OS = runtime.GOARCH, "linux"
	cfg.History = nil // AppendLayers' empty entries, one per layer
	cfg.Config = v1.Config{Env: append([]string{imagePath}, img.Env...), Entrypoint: img.Entrypoint,
		Cmd: img.Cmd, User: img.User, Labels: img.Labels, WorkingDir: "/"}
	image, err = mutate.ConfigFile(image, cfg)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Ref, err)
	}
	return mutate.ConfigMediaType(image, types.OCIConfigJSON), nil
}

// filesLayer is a layer tar holding files and the directories above them.
func filesLayer(files []ImageFile) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		name := strings.TrimPrefix(path.Clean(f.Path), "/")
		var parents []string
		for d := path.Dir(name); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{Name: d + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: imageEpoch}); err != nil {
				return nil, fmt.Errorf("write layer: %w", err)
			}
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: name, Mode: mode, Size: int64(len(f.Data)), Typeflag: tar.TypeReg, ModTime: imageEpoch, Uname: "root", Gname: "root"}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("write layer: %w", err)
		}
		if _, err := tw.Write([]byte(f.Data)); err != nil {
			return nil, fmt.Errorf("write layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}
	return buf.Bytes(), nil
}
