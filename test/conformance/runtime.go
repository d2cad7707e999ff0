package main

import (
	"context"
	"fmt"

	"github.com/crishim/crishim/test/harness"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// startRuntime is the one place that turns RUNTIME into a private runtime: the harness
// starts it in a slot of its own, with pulls of the mirrored registries sent to the offline
// registry. The harness of this branch starts Debian's containerd 1.6 only; containerd 2.x
// and CRI-O come with its runtime selection (Options.Runtime).
func startRuntime(ctx context.Context, name string, mirrors map[string]string) (*harness.Containerd, error) {
	switch name {
	case "", "containerd-1.6":
		return harness.Start(ctx, harness.Options{Mirrors: mirrors})
	default:
		return nil, fmt.Errorf("RUNTIME=%s: this test bed's harness starts containerd-1.6 only", name)
	}
}

// runtimeVersion is what the runtime says it is, for the report.
func runtimeVersion(ctx context.Context, cd *harness.Containerd) (string, error) {
	conn, err := cd.Dial()
	if err != nil {
		return "", err
	}
	defer conn.Close()
	v, err := runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		return "", fmt.Errorf("runtime version: %w", err)
	}
	return v.GetRuntimeName() + " " + v.GetRuntimeVersion(), nil
}
