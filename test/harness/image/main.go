// Command image builds crishim-notification-controller as a static binary and writes its
// OCI image archive, and the fleet installer's (crishim-node-installer, crishim's binaries,
// units and kubelet drop-ins) (`make image`), offline: no registry, no image builder. Import it into
// a node's runtime (containerd: `ctr -n k8s.io images import FILE`).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/crishim/crishim/test/harness"
)

// Ref is the image name packaging/kubernetes/notification-controller.yaml runs.
const Ref = harness.NotificationControllerImage

func main() {
	out := flag.String("out", "bin/crishim-notification-controller.oci.tar", "the OCI archive to write")
	installerOut := flag.String("installer-out", "bin/crishim-node-installer.oci.tar", "the fleet installer's OCI archive to write (packaging/kubernetes/install)")
	installerVersion := flag.String("installer-version", "dev", "the version its binaries report")
	flag.Parse()
	if err := build(context.Background(), *out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	if err := buildInstaller(context.Background(), *installerOut, *installerVersion); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func build(ctx context.Context, out string) error {
	dir, err := os.MkdirTemp("", "crishim-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "crishim-notification-controller")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/crishim-notification-controller")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	archive, err := harness.BinaryImageArchive(Ref, bin, data)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, archive, 0o644); err != nil {
		return err
	}
	fmt.Printf("image: %s (%s, %d bytes)\n", out, Ref, len(archive))
	return nil
}

// buildInstaller writes the fleet installer's image (crishim-node-installer with crishim's
// binaries, units and kubelet drop-ins) to out.
func buildInstaller(ctx context.Context, out, version string) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	archive, err := harness.NodeInstallerImageArchive(ctx, root, harness.NodeInstallerRef, version)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, archive, 0o644); err != nil {
		return err
	}
	fmt.Printf("image: %s (%s, %d bytes)\n", out, harness.NodeInstallerRef, len(archive))
	return nil
}
