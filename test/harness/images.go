package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Image names under which the offline-built images are imported. The tag is one no registry
// serves, so a test can never accidentally run something pulled from the network.
const (
	// PauseImage is the sandbox ("pause") image; the CRI config's sandbox_image names it.
	PauseImage = "registry.k8s.io/pause:crishim-test"
	// BusyboxImage is a general-purpose image: busybox with every applet linked into /bin.
	BusyboxImage = "docker.io/library/busybox:crishim-test"
	// SpareImage is busybox under another config, so a distinct image: tests may remove it
	// (CRI RemoveImage drops every name of an image) without taking BusyboxImage away.
	SpareImage = "docker.io/library/busybox:crishim-spare"
)

// pauseScript keeps a sandbox alive without a pause binary. The trap makes it exit 0 on
// SIGTERM/SIGINT (a shell as PID 1 would otherwise ignore them); sleeping in the background
// and waiting lets the trap run as soon as a signal arrives.
const pauseScript = `trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done`

// imagePath is the PATH baked into both images.
const imagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Media types of the OCI image spec, spelled out to avoid a dependency for four strings.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// imageEpoch timestamps every file and config, so a given busybox always yields the same
// digests and importing into a reused content store is a no-op.
var imageEpoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// blob is one content-addressed file of the layout.
type blob struct {
	digest string
	data   []byte
}

func newBlob(data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{digest: "sha256:" + hex.EncodeToString(sum[:]), data: data}
}

func (b blob) descriptor(mediaType string) descriptor {
	return descriptor{MediaType: mediaType, Digest: b.digest, Size: int64(len(b.data))}
}

// imageArchive caches the OCI archive: the inputs (busybox) do not change while a process
// runs, and tests start many harnesses.
var imageArchive struct {
	sync.Mutex
	data []byte
}

// buildImageArchive returns an OCI image-layout tar holding both images. They share one
// layer; only their configs differ, so the archive is a little over one busybox in size.
func buildImageArchive(ctx context.Context) ([]byte, error) {
	imageArchive.Lock()
	defer imageArchive.Unlock()
	if imageArchive.data != nil {
		return imageArchive.data, nil
	}

	layerData, err := busyboxLayer(ctx)
	if err != nil {
		return nil, err
	}
	layer := newBlob(layerData)
	blobs := []blob{layer}
	var manifests []descriptor
	for _, img := range []struct {
		name       string
		entrypoint []string
		cmd        []string
	}{
		{name: PauseImage, entrypoint: []string{"/bin/sh", "-c", pauseScript}},
		{name: BusyboxImage, cmd: []string{"/bin/sh"}},
		{name: SpareImage, cmd: []string{"/bin/true"}},
	} {
		config, manifest, d, err := imageManifest(img.name, layer, map[string]any{
			"Env":        []string{imagePath},
			"Entrypoint": img.entrypoint,
			"Cmd":        img.cmd,
			"WorkingDir": "/",
		}, "crishim test harness from "+busyboxPath)
		if err != nil {
			return nil, err
		}
		blobs = append(blobs, config, manifest)
		manifests = append(manifests, d)
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeIndex,
		"manifests":     manifests,
	})
	if err != nil {
		return nil, fmt.Errorf("encode index: %w", err)
	}

	data, err := writeLayout(index, blobs)
	if err != nil {
		return nil, err
	}
	imageArchive.data = data
	return imageArchive.data, nil
}

// imageManifest is the config and manifest blobs of the one-layer image ref whose
// container config is cfg, and the manifest's descriptor for the layout's index.
func imageManifest(ref string, layer blob, cfg map[string]any, createdBy string) (config, manifest blob, d descriptor, err error) {
	c, err := json.Marshal(map[string]any{
		"created":      imageEpoch,
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       cfg,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layer.digest}},
		"history":      []map[string]any{{"created": imageEpoch, "created_by": createdBy}},
	})
	if err != nil {
		return blob{}, blob{}, descriptor{}, fmt.Errorf("encode image config: %w", err)
	}
	config = newBlob(c)
	man, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeManifest,
		"config":        config.descriptor(mediaTypeConfig),
		"layers":        []descriptor{layer.descriptor(mediaTypeLayer)},
	})
	if err != nil {
		return blob{}, blob{}, descriptor{}, fmt.Errorf("encode manifest: %w", err)
	}
	manifest = newBlob(man)
	d = manifest.descriptor(mediaTypeManifest)
	d.Platform = &platform{Architecture: runtime.GOARCH, OS: "linux"}
	// containerd's importer names the image after io.containerd.image.name; the OCI
	// annotation is there for other tools reading the archive.
	d.Annotations = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:],
	}
	return config, manifest, d, nil
}

// writeLayout is the OCI image-layout tar of index and blobs (each stored once).
func writeLayout(index []byte, blobs []blob) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, data []byte) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: imageEpoch, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
	}
	seen := map[string]bool{}
	for _, b := range blobs {
		if seen[b.digest] {
			continue
		}
		seen[b.digest] = true
		files = append(files, struct {
			name string
			data []byte
		}{"blobs/sha256/" + strings.TrimPrefix(b.digest, "sha256:"), b.data})
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Mode: 0o755, ModTime: imageEpoch, Typeflag: tar.TypeDir}); err != nil {
			return nil, fmt.Errorf("write image archive: %w", err)
		}
	}
	for _, f := range files {
		if err := add(f.name, f.data); err != nil {
			return nil, fmt.Errorf("write image archive: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("write image archive: %w", err)
	}
	return buf.Bytes(), nil
}

// busyboxLayer builds the uncompressed root filesystem tar shared by both images. It is left
// uncompressed because compression would cost more time than the import saves.
func busyboxLayer(ctx context.Context) ([]byte, error) {
	bin, err := os.ReadFile(busyboxPath)
	if err != nil {
		return nil, fmt.Errorf("read busybox: %w", err)
	}
	out, err := exec.CommandContext(ctx, busyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets: %w", err)
	}
	applets := strings.Fields(string(out))

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(h *tar.Header) error {
		h.ModTime = imageEpoch
		h.Uname, h.Gname = "root", "root"
		return tw.WriteHeader(h)
	}
	dirs := []struct {
		name string
		mode int64
	}{
		{"bin/", 0o755}, {"dev/", 0o755}, {"etc/", 0o755}, {"proc/", 0o555}, {"root/", 0o700},
		{"sys/", 0o555}, {"tmp/", 0o1777}, {"usr/", 0o755}, {"usr/bin/", 0o755}, {"var/", 0o755},
	}
	for _, d := range dirs {
		if err := hdr(&tar.Header{Name: d.name, Mode: d.mode, Typeflag: tar.TypeDir}); err != nil {
			return nil, fmt.Errorf("write layer: %w", err)
		}
	}
	if err := hdr(&tar.Header{Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg}); err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}
	for _, a := range applets {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		// Hard links, as in the busybox images on Docker Hub: masking one applet's path
		// (CRI MaskedPaths mounts /dev/null over it) then masks that applet only, where
		// masking a symlink would mask busybox itself, and every applet with it.
		if err := hdr(&tar.Header{Name: "bin/" + a, Linkname: "bin/busybox", Mode: 0o755, Typeflag: tar.TypeLink}); err != nil {
			return nil, fmt.Errorf("write layer: %w", err)
		}
	}
	for _, f := range []struct{ name, data string }{
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
		{"etc/group", "root:x:0:\nnobody:x:65534:\n"},
	} {
		if err := hdr(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, fmt.Errorf("write layer: %w", err)
		}
		if _, err := tw.Write([]byte(f.data)); err != nil {
			return nil, fmt.Errorf("write layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}
	return buf.Bytes(), nil
}

// importImages loads the archive into containerd's CRI namespace with ctr, which also
// unpacks it into the default (overlayfs) snapshotter, and then waits until the CRI plugin,
// which learns about images from containerd events, reports both.
func importImages(ctx context.Context, l layout, ctr string) error {
	archive, err := buildImageArchive(ctx)
	if err != nil {
		return err
	}
	return ctrImport(ctx, l, ctr, l.imagesTar(), archive, PauseImage, BusyboxImage, SpareImage)
}

// ctrImport writes archive (an OCI image layout tar) to path, imports it with ctr into the
// CRI namespace and waits until CRI reports names.
func ctrImport(ctx context.Context, l layout, ctr, path string, archive []byte, names ...string) error {
	if err := os.WriteFile(path, archive, 0o644); err != nil {
		return fmt.Errorf("write image archive: %w", err)
	}
	cmd := exec.CommandContext(ctx, ctr, "--address", l.socket(), "--namespace", criNamespace,
		"images", "import", "--platform", "linux/"+runtime.GOARCH, path)
	// Like containerd, ctr must not outlive a killed test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import: %w\n%s", err, tail(out, 2048))
	}
	return waitImages(ctx, l, names...)
}

// waitImages waits until the runtime's CRI image service reports every name: containerd's
// CRI plugin learns of imports from events, CRI-O rereads its store, both a moment later.
func waitImages(ctx context.Context, l layout, names ...string) error {
	conn, err := dialCRI(l.socket())
	if err != nil {
		return err
	}
	defer conn.Close()
	images := runtimeapi.NewImageServiceClient(conn)
	for _, name := range names {
		err := poll(ctx, 10*time.Second, func(ctx context.Context) error {
			resp, err := images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: name}})
			if err != nil {
				return err
			}
			if resp.GetImage() == nil {
				return fmt.Errorf("CRI does not report image %s yet", name)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("wait for imported image: %w", err)
		}
	}
	return nil
}

// ctrTag gives image src the name dst too, with ctr in the CRI namespace.
func ctrTag(ctx context.Context, l layout, ctr, src, dst string) error {
	out, err := exec.CommandContext(ctx, ctr, "--address", l.socket(), "--namespace", criNamespace,
		"images", "tag", "--force", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images tag %s %s: %w: %s", src, dst, err, out)
	}
	return waitImages(ctx, l, dst)
}
