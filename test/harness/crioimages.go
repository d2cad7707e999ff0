package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// importCRIOImages puts the offline images into CRI-O's store. CRI-O pulls only from
// registries (PullImage takes a registry reference, no archive transport), so the OCI
// layout is copied into containers-storage by ociload, built with CRI-O's own
// containers/image and containers/storage; CRI-O reads the store on every image call and
// then reports the images under the names containerd's import gives them.
func importCRIOImages(ctx context.Context, l layout) error {
	archive, err := buildImageArchive(ctx)
	if err != nil {
		return err
	}
	if err := untar(archive, l.crioImages()); err != nil {
		return fmt.Errorf("unpack image archive: %w", err)
	}
	b, err := cachedCRIOBins()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, b.ociload(), l.crioImages(), l.crioStore())
	cmd.Env = append(os.Environ(), crioEnv(l)...)
	// Like crio, ociload must not outlive a killed test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ociload: %w\n%s", err, tail(out, 2048))
	}
	return waitImages(ctx, l)
}

// waitImages waits until CRI reports PauseImage, BusyboxImage and SpareImage.
func waitImages(ctx context.Context, l layout) error {
	conn, err := dialCRI(l.socket())
	if err != nil {
		return err
	}
	defer conn.Close()
	images := runtimeapi.NewImageServiceClient(conn)
	for _, name := range []string{PauseImage, BusyboxImage, SpareImage} {
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

// untar writes the image archive (regular files and directories only, as
// buildImageArchive makes it) into dir.
func untar(archive []byte, dir string) error {
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("entry %q leaves the archive", h.Name)
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: unexpected type %c", h.Name, h.Typeflag)
		}
	}
}
