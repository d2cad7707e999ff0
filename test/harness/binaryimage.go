package harness

import (
	"encoding/json"
	"fmt"
	"path"
)

// NotificationControllerImage is the image name packaging/kubernetes/notification-controller.yaml
// runs and `make image` builds.
const NotificationControllerImage = "localhost/crishim/notification-controller:latest"

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
	config, manifest, d, err := imageManifest(ref, layer,
		map[string]any{"Entrypoint": []string{name}, "WorkingDir": "/", "User": "65532:65532"},
		"crishim test harness: "+path.Base(binaryPath))
	if err != nil {
		return nil, err
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaTypeIndex, "manifests": []descriptor{d}})
	if err != nil {
		return nil, fmt.Errorf("encode index: %w", err)
	}
	return writeLayout(index, []blob{layer, config, manifest})
}

// FilesImageArchive is an OCI image-layout tar of one image named ref whose only layer holds
// files, run as root with entrypoint: how the test bed builds the fleet installer's image
// offline (NodeInstallerImageArchive).
func FilesImageArchive(ref string, files []ImageFile, entrypoint []string, createdBy string) ([]byte, error) {
	layerData, err := filesLayer(files)
	if err != nil {
		return nil, err
	}
	layer := newBlob(layerData)
	config, manifest, d, err := imageManifest(ref, layer,
		map[string]any{"Entrypoint": entrypoint, "WorkingDir": "/", "User": "0:0"}, createdBy)
	if err != nil {
		return nil, err
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaTypeIndex, "manifests": []descriptor{d}})
	if err != nil {
		return nil, fmt.Errorf("encode index: %w", err)
	}
	return writeLayout(index, []blob{layer, config, manifest})
}
