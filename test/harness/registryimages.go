package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"runtime"
	"strings"
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

// manifestBlobs builds the image's layers, config and manifest. base is the busybox layer,
// shared by every image.
func (img RegistryImage) manifestBlobs(base blob) (manifest blob, others []blob, err error) {
	layers := []blob{base}
	if len(img.Files) > 0 {
		data, err := filesLayer(img.Files)
		if err != nil {
			return blob{}, nil, fmt.Errorf("image %s: %w", img.Ref, err)
		}
		layers = append(layers, newBlob(data))
	}
	diffIDs := make([]string, len(layers))
	descs := make([]descriptor, len(layers))
	for i, l := range layers {
		// Uncompressed layers: the diff ID is the blob's digest.
		diffIDs[i] = l.digest
		descs[i] = l.descriptor(mediaTypeLayer)
	}
	cfg, err := json.Marshal(map[string]any{
		"created":      imageEpoch,
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config": map[string]any{
			"Env":        append([]string{imagePath}, img.Env...),
			"Entrypoint": img.Entrypoint,
			"Cmd":        img.Cmd,
			"User":       img.User,
			"Labels":     img.Labels,
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	if err != nil {
		return blob{}, nil, fmt.Errorf("encode config of %s: %w", img.Ref, err)
	}
	config := newBlob(cfg)
	man, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeManifest,
		"config":        config.descriptor(mediaTypeConfig),
		"layers":        descs,
	})
	if err != nil {
		return blob{}, nil, fmt.Errorf("encode manifest of %s: %w", img.Ref, err)
	}
	return newBlob(man), append(layers, config), nil
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

// splitRef cuts "host/repo/path:tag" into the repository path and the tag ("latest" when
// there is none). References by digest are not served: a digest names bytes this registry
// cannot reproduce.
func splitRef(ref string) (repo, tag string, err error) {
	host, rest, ok := strings.Cut(ref, "/")
	if !ok || !strings.ContainsAny(host, ".:") {
		return "", "", fmt.Errorf("image reference %q does not name a registry host", ref)
	}
	if strings.Contains(rest, "@") {
		return "", "", fmt.Errorf("image reference %q is by digest", ref)
	}
	repo, tag = rest, "latest"
	if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
		repo, tag = rest[:i], rest[i+1:]
	}
	return repo, tag, nil
}

// buildRegistryContent builds every image once, on one busybox layer.
func buildRegistryContent(ctx context.Context, images []RegistryImage) (manifests map[string]blob, blobs map[string]blob, hosts []string, err error) {
	layer, err := busyboxLayer(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	base := newBlob(layer)
	manifests, blobs = map[string]blob{}, map[string]blob{}
	seenHost := map[string]bool{}
	for _, img := range images {
		repo, tag, err := splitRef(img.Ref)
		if err != nil {
			return nil, nil, nil, err
		}
		man, others, err := img.manifestBlobs(base)
		if err != nil {
			return nil, nil, nil, err
		}
		manifests[repo+":"+tag] = man
		blobs[man.digest] = man
		for _, b := range others {
			blobs[b.digest] = b
		}
		if host, _, _ := strings.Cut(img.Ref, "/"); !seenHost[host] {
			seenHost[host] = true
			hosts = append(hosts, host)
		}
	}
	return manifests, blobs, hosts, nil
}
