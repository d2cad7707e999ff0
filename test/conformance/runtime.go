package main

import (
	"context"

	"github.com/crishim/crishim/test/harness"
)

// startRuntime is the one place that turns RUNTIME into a private runtime: the harness
// starts it in a slot of its own (RUNTIME as the harness reads it: containerd 2.x by
// default, crio, containerd-1.6), with the pulls of the mirrored registries sent to the
// offline registry.
func startRuntime(ctx context.Context, name string, mirrors map[string]string) (*harness.Containerd, error) {
	rt, err := harness.ParseRuntime(name)
	if err != nil {
		return nil, err
	}
	return harness.Start(ctx, harness.Options{Runtime: rt, Mirrors: mirrors})
}

// crishimArgs are the flags crishim needs for the runtime: a containerd's API socket for
// crishim's containerd-native paths ("" turns them off, for CRI-O).
func crishimArgs(cd *harness.Containerd) []string {
	return []string{"--containerd-address", cd.ContainerdAddress}
}
