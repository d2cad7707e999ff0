package harness

import "context"

// ContainerdBinDir returns the directory of the cached containerd 2.x build (containerd,
// ctr, containerd-shim-runc-v2), building it first if needed: test/node installs the same
// build on its systemd node.
func ContainerdBinDir(ctx context.Context) (string, error) {
	b, err := ensureContainerd(ctx)
	return b.dir, err
}

// ImageArchive returns the bed's offline images (PauseImage, BusyboxImage, SpareImage) as
// an OCI image-layout tar, for `ctr images import` on a node the harness does not start.
func ImageArchive(ctx context.Context) ([]byte, error) {
	return buildImageArchive(ctx)
}

// ContainerdVersion is the containerd release ContainerdBinDir builds.
const ContainerdVersion = containerdVersion
