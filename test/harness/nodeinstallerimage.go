package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// NodeInstallerRef is the image packaging/kubernetes/install/installer.yaml runs.
const NodeInstallerRef = "localhost/crishim/node-installer:latest"

// NodeInstallerImageArchive builds the fleet installer's image from the checkout at root,
// offline: crishim-node-installer (the entrypoint) and its payload, /payload/bin/crishim and
// crishimctl, /payload/systemd/crishim.service and crishim.socket (packaging/systemd, as the
// manual installation puts them: ExecStart=/usr/local/bin/crishim) and
// /payload/kubelet/<dir>/90-crishim.conf (packaging/kubelet), and /THIRD_PARTY_NOTICES
// (packaging/notices). The binaries are static and report version (-X main.version). It
// returns the OCI archive for ref.
func NodeInstallerImageArchive(ctx context.Context, root, ref, version string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "crishim-node-installer-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var files []ImageFile
	for _, c := range []struct{ cmd, dst string }{
		{"crishim-node-installer", "/crishim-node-installer"},
		{"crishim", "/payload/bin/crishim"},
		{"crishimctl", "/payload/bin/crishimctl"},
	} {
		out := filepath.Join(dir, c.cmd)
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
			"-ldflags=-s -w -X main.version="+version, "-o", out, "./cmd/"+c.cmd)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build %s: %w\n%s", c.cmd, err, b)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			return nil, err
		}
		files = append(files, ImageFile{Path: c.dst, Mode: 0o755, Data: string(b)})
	}
	// The licence and notice files of every module the three static binaries link, as the
	// tarballs and the package carry them for crishim and crishimctl.
	notices := filepath.Join(dir, "THIRD_PARTY_NOTICES")
	cmd := exec.CommandContext(ctx, "go", "run", "./packaging/notices", "--out", notices,
		filepath.Join(dir, "crishim-node-installer"), filepath.Join(dir, "crishim"), filepath.Join(dir, "crishimctl"))
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("packaging/notices: %w\n%s", err, b)
	}
	b, err := os.ReadFile(notices)
	if err != nil {
		return nil, err
	}
	files = append(files, ImageFile{Path: "/THIRD_PARTY_NOTICES", Mode: 0o644, Data: string(b)})
	for _, src := range []string{
		"systemd/crishim.service", "systemd/crishim.socket",
		"kubelet/kubelet.service.d/90-crishim.conf", "kubelet/kubelet.conf.d/90-crishim.conf",
	} {
		dst := "/payload/" + src
		src = filepath.Join("packaging", src)
		b, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			return nil, err
		}
		files = append(files, ImageFile{Path: dst, Mode: 0o644, Data: string(b)})
	}
	return FilesImageArchive(ref, files, []string{"/crishim-node-installer"}, "crishim test harness: crishim-node-installer "+version)
}
