package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// NotificationControllerArchive builds cmd/crishim-notification-controller of the module at
// repo as a static binary and returns its OCI image archive, NotificationControllerImage:
// `make image` writes it to a file, the test bed's node imports it into its runtime.
func NotificationControllerArchive(ctx context.Context, repo string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "crishim-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "crishim-notification-controller")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./cmd/crishim-notification-controller")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/crishim-notification-controller: %w\n%s", err, tail(out, 4096))
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	return BinaryImageArchive(NotificationControllerImage, bin, data)
}
