package proxy

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

// TestBackendCallsLookLikeTheKubelets compares the headers of a call crishim
// makes to the runtime itself (intercepted calls, status, mode detection)
// with the kubelet's own client's. Runtimes match on them: CRI-O serves its
// socket through cmux, which hands gRPC only an exact
// "content-type: application/grpc" and resets everything else, so a
// "+proto" subtype broke every intercepted call there.
func TestBackendCallsLookLikeTheKubelets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sock := fakeSock(t)
	f := &fakeRuntime{}
	startFake(t, sock, f)
	headers := func(call func() error) metadata.MD {
		t.Helper()
		if err := call(); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		md := f.lastMD.Copy()
		delete(md, "grpc-timeout") // each call's own deadline
		return md
	}

	kubelet, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint("unix://" + sock).WithConnectionTimeout(10 * time.Second).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := headers(func() error { _, err := kubelet.Version(ctx, "v1"); return err })

	b := dialBackend(t, sock)
	got := headers(func() error {
		_, err := runtimeapi.NewRuntimeServiceClient(b.RuntimeConn()).Version(ctx, &runtimeapi.VersionRequest{Version: "v1"})
		return err
	})

	if ct := got.Get("content-type"); len(ct) != 1 || ct[0] != "application/grpc" {
		t.Errorf("crishim's content-type = %q, want exactly application/grpc", ct)
	}
	for k, v := range want {
		if g := got.Get(k); len(g) != len(v) || len(g) > 0 && g[0] != v[0] {
			t.Errorf("header %q: crishim sends %q, the kubelet's client %q", k, g, v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("header %q: crishim sends %q, the kubelet's client none", k, v)
		}
	}
}
