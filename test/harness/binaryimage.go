package harness

import (
	"encoding/json"
	"fmt"
	"path"
	"runtime"
	"strings"
)

// BinaryImageArchive is an OCI image-layout tar of one image named ref whose only layer is
// the static binary at /<base name of binaryPath>, its entrypoint: how the test bed builds
// crishim-notification-controller's image offline (`make image`). Runtimes import it
// (containerd: ctr images import; CRI-O: from the oci-archive transport).
func BinaryImageArchive(ref, binaryPath string, binary []byte) ([]byte, error) {
	name := "/" + path.Base(binaryPath)
	layerData, err := filesLayer([]ImageFile{{Path: name, Mode: 0o755, Data: string(binary)}})
	if err != nil {
		return nil, err
	}
	layer := newBlob(layerData)
	cfg, err := json.Marshal(map[string]any{
		"created":      imageEpoch,
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{name}, "WorkingDir": "/", "User": "65532:65532"},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layer.digest}},
		"history":      []map[string]any{{"created": imageEpoch, "created_by": "crishim test harness: " + path.Base(binaryPath)}},
	})
	if err != nil {
		return nil, fmt.Errorf("encode image config: %w", err)
	}
	config := newBlob(cfg)
	man, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaTypeManifest,
		"config":        config.descriptor(mediaTypeConfig),
		"layers":        []descriptor{layer.descriptor(mediaTypeLayer)},
	})
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	manifest := newBlob(man)
	d := manifest.descriptor(mediaTypeManifest)
	d.Platform = &platform{Architecture: runtime.GOARCH, OS: "linux"}
	d.Annotations = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:],
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaTypeIndex, "manifests": []descriptor{d}})
	if err != nil {
		return nil, fmt.Errorf("encode index: %w", err)
	}
	return writeLayout(index, []blob{layer, config, manifest})
}
