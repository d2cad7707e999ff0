package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"

	"github.com/crishim/crishim/test/crishimproc"
)

// startCrishim starts crishim in front of runtimeEndpoint and waits until it
// serves. It is stopped (SIGTERM) when the test ends, unless already stopped.
func startCrishim(t *testing.T, runtimeEndpoint string, extra ...string) *crishimproc.Process {
	t.Helper()
	dir := t.TempDir()
	if runtimeEndpoint == testbed.Endpoint {
		// Said outright rather than left to crishim's default (the runtime endpoint's
		// path), which is wrong for a runtime that is not containerd: there it is "".
		// A test's own --containerd-address in extra comes later and wins.
		extra = append([]string{"--containerd-address", testbed.ContainerdAddress}, extra...)
	}
	p, err := crishimproc.Start(crishimproc.Options{
		Binary:          filepath.Join(binDir, "crishim"),
		Socket:          filepath.Join(dir, "crishim.sock"),
		RuntimeEndpoint: runtimeEndpoint,
		LogPath:         filepath.Join(dir, "crishim.log"),
		Args:            append([]string{"--log-level", "debug"}, extra...),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Stop()
		if t.Failed() {
			t.Logf("crishim log:\n%s", p.Log())
		}
	})
	return p
}

// criClients connects the kubelet's own CRI client to endpoint.
func criClients(t *testing.T, endpoint string) (internalapi.RuntimeService, internalapi.ImageManagerService) {
	t.Helper()
	ctx := context.Background()
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(2 * time.Minute).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close(ctx) })
	is, err := remote.NewRemoteImageServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(2 * time.Minute).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rs, is
}
