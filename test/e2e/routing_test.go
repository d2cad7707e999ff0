package e2e

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestRoutingSpellingsThroughCrishim: containerd 1.6 serves a method
// spelled without its leading slash and CRI v1alpha2, either of which would
// reach CreateContainer without crishim's checks; through crishim both are
// refused. Version stands for every method: it changes
// nothing.
func TestRoutingSpellingsThroughCrishim(t *testing.T) {
	spellings := []struct{ path, msg string }{
		{"runtime.v1.RuntimeService/Version", "malformed method name"},
		{"/runtime.v1alpha2.RuntimeService/Version", "CRI v1 only"},
	}
	invoke := func(t *testing.T, endpoint, path string) error {
		conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.Invoke(context.Background(), path, &runtimeapi.VersionRequest{}, &runtimeapi.VersionResponse{})
	}
	for _, s := range spellings {
		err := invoke(t, testbed.Endpoint, s.path)
		t.Logf("directly, containerd answers %q: %v", s.path, status.Convert(err).Code())
	}
	p := startCrishim(t, testbed.Endpoint)
	for _, s := range spellings {
		st := status.Convert(invoke(t, p.Endpoint, s.path))
		if st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), s.msg) {
			t.Errorf("through crishim, %q: %v; want Unimplemented with %q", s.path, st.Err(), s.msg)
		}
	}
	if err := invoke(t, p.Endpoint, "/runtime.v1.RuntimeService/Version"); err != nil {
		t.Errorf("through crishim, Version: %v", err)
	}
}
