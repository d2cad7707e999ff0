// Command image builds crishim-notification-controller as a static binary and writes its
// OCI image archive (`make image`), offline: no registry, no image builder. Import it into
// a node's runtime (containerd: `ctr -n k8s.io images import FILE`); the test bed's node
// (`make node`) does so itself.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/crishim/crishim/test/harness"
)

func main() {
	out := flag.String("out", "bin/crishim-notification-controller.oci.tar", "the OCI archive to write")
	flag.Parse()
	if err := build(context.Background(), *out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func build(ctx context.Context, out string) error {
	archive, err := harness.NotificationControllerArchive(ctx, ".")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, archive, 0o644); err != nil {
		return err
	}
	fmt.Printf("image: %s (%s, %d bytes)\n", out, harness.NotificationControllerImage, len(archive))
	return nil
}
