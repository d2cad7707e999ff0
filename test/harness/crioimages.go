package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
	return ociloadArchive(ctx, l, l.crioImages(), archive, PauseImage, BusyboxImage, SpareImage)
}

// ociloadArchive unpacks archive (an OCI image layout tar) into dir, copies it into CRI-O's
// store with ociload and waits until CRI reports names.
func ociloadArchive(ctx context.Context, l layout, dir string, archive []byte, names ...string) error {
	if err := untar(archive, dir); err != nil {
		return fmt.Errorf("unpack image archive: %w", err)
	}
	b, err := cachedCRIOBins()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, b.ociload(), dir, l.crioStore())
	cmd.Env = append(os.Environ(), crioEnv(l)...)
	// Like crio, ociload must not outlive a killed test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ociload: %w\n%s", err, tail(out, 2048))
	}
	return waitImages(ctx, l, names...)
}

// importCRIOArchive is backend.importArchive for CRI-O: each archive in a layout directory of
// its own beside the slot's, named for its first image.
func importCRIOArchive(ctx context.Context, l layout, archive []byte, names ...string) error {
	dir := filepath.Join(filepath.Dir(l.crioImages()), "import-"+archiveName(names))
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	return ociloadArchive(ctx, l, dir, archive, names...)
}

// tagCRIOImage gives image src the name dst too. CRI has no tag call and CRI-O no other
// API, so ociload copies src once more from the slot's OCI layout, under the new name: a
// layout of one manifest, src's, named dst, on the same blobs. The store has every layer
// already, so this only adds a name.
func tagCRIOImage(ctx context.Context, l layout, src, dst string) error {
	b, err := os.ReadFile(filepath.Join(l.crioImages(), "index.json"))
	if err != nil {
		return fmt.Errorf("read the slot's image layout: %w", err)
	}
	var index struct {
		SchemaVersion int              `json:"schemaVersion"`
		MediaType     string           `json:"mediaType"`
		Manifests     []map[string]any `json:"manifests"`
	}
	if err := json.Unmarshal(b, &index); err != nil {
		return fmt.Errorf("parse the slot's image layout: %w", err)
	}
	var named []map[string]any
	for _, m := range index.Manifests {
		if a, _ := m["annotations"].(map[string]any); a != nil && a["io.containerd.image.name"] == src {
			a["io.containerd.image.name"] = dst
			named = append(named, m)
		}
	}
	if len(named) != 1 {
		return fmt.Errorf("tag %s: the slot's image layout has %d images of that name, want 1", src, len(named))
	}
	index.Manifests = named
	dir := l.crioImages() + "-tag"
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for _, f := range []string{"blobs", "oci-layout"} {
		if err := os.Symlink(filepath.Join(l.crioImages(), f), filepath.Join(dir, f)); err != nil {
			return fmt.Errorf("link the layout's %s: %w", f, err)
		}
	}
	if b, err = json.Marshal(index); err != nil {
		return fmt.Errorf("encode index: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), b, 0o644); err != nil {
		return fmt.Errorf("write index: %w", err)
	}
	bins, err := cachedCRIOBins()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, bins.ociload(), dir, l.crioStore())
	cmd.Env = append(os.Environ(), crioEnv(l)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ociload (tag %s as %s): %w\n%s", src, dst, err, tail(out, 2048))
	}
	return waitImages(ctx, l, dst)
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
