package shim

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/crishim/crishim/shim/crishimv1"
)

func TestNotifyRequestErrors(t *testing.T) {
	s := startSignalShim(t, newTargetFake(), "auto", false)
	a := &api{shim: s}
	tests := []struct {
		name string
		req  *crishimv1.NotifyRequest
		msg  string
	}{
		{"no notifier", &crishimv1.NotifyRequest{PodSandboxId: "pod1"}, "notifier: empty"},
		{"no pods", &crishimv1.NotifyRequest{Notifier: "reload"}, "give exactly one"},
		{"both selections", &crishimv1.NotifyRequest{Notifier: "reload", PodSandboxId: "pod1", LabelSelector: map[string]string{"app": "x"}}, "give exactly one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.Notify(context.Background(), tt.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Notify: %v; want InvalidArgument with %q", err, tt.msg)
			}
		})
	}
}
