// Command ociload copies every image of an OCI image layout into a containers-storage store,
// named by each manifest's io.containerd.image.name annotation. The test harness runs it on
// its offline-built images before starting CRI-O, because CRI-O only pulls from registries and
// none is reachable. It is built with the same containers/image and containers/storage as the
// CRI-O next to it, so the store it writes is one that CRI-O reads.
//
//	ociload LAYOUT-DIR STORE
//
// STORE is containers-storage's own bracket form, "[overlay@GRAPHROOT+RUNROOT]".
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containers/image/v5/copy"
	"github.com/containers/image/v5/oci/layout"
	"github.com/containers/image/v5/signature"
	"github.com/containers/image/v5/transports/alltransports"
	"github.com/containers/image/v5/types"
	"github.com/containers/storage/pkg/reexec"
)

// nameAnnotation is the annotation the harness names its images by (containerd's importer reads it).
const nameAnnotation = "io.containerd.image.name"

func main() {
	// containers/storage unpacks layers in a re-executed copy of this binary (chrooted into
	// the layer), which must run the unpacker instead of main.
	if reexec.Init() {
		return
	}
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: ociload LAYOUT-DIR [DRIVER@GRAPHROOT+RUNROOT]")
		os.Exit(2)
	}
	if err := load(context.Background(), os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "ociload:", err)
		os.Exit(1)
	}
}

func load(ctx context.Context, dir, store string) error {
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return fmt.Errorf("read layout index: %w", err)
	}
	var index struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(b, &index); err != nil {
		return fmt.Errorf("parse layout index: %w", err)
	}
	// The images are ours, built a moment ago: no signature to check.
	policy, err := signature.NewPolicyContext(&signature.Policy{Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()}})
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	defer policy.Destroy()
	for i, m := range index.Manifests {
		name := m.Annotations[nameAnnotation]
		if name == "" {
			return fmt.Errorf("manifest %d of %s has no %s annotation", i, dir, nameAnnotation)
		}
		src, err := layout.NewIndexReference(dir, i)
		if err != nil {
			return fmt.Errorf("source %s @%d: %w", dir, i, err)
		}
		dst, err := alltransports.ParseImageName("containers-storage:" + store + name)
		if err != nil {
			return fmt.Errorf("destination %s: %w", name, err)
		}
		// The layout's manifests are uncompressed and stay so: the store unpacks them anyway.
		if _, err := copy.Image(ctx, policy, dst, src, &copy.Options{SourceCtx: &types.SystemContext{}, DestinationCtx: &types.SystemContext{}}); err != nil {
			return fmt.Errorf("copy %s: %w", name, err)
		}
	}
	return nil
}
