package shim

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/shim/crishimv1"
)

func TestSignalAPIErrors(t *testing.T) {
	f := newTargetFake()
	f.add("created", "pod1", runtimeapi.ContainerState_CONTAINER_CREATED)
	f.add("exited", "pod1", runtimeapi.ContainerState_CONTAINER_EXITED)
	s := startSignalShim(t, f, "auto", false)
	a := &api{shim: s}
	tests := []struct {
		name, id, signal string
		code             codes.Code
		msg              string
	}{
		{"no container", "", "SIGHUP", codes.InvalidArgument, "container_id: empty"},
		{"unknown signal", "created", "SIGFOO", codes.InvalidArgument, `signal: "SIGFOO"`},
		{"signal 0", "created", "0", codes.InvalidArgument, "signal:"},
		{"unknown container", "nosuch", "SIGHUP", codes.NotFound, `container_id: container "nosuch" not found`},
		{"created, not running", "created", "SIGHUP", codes.FailedPrecondition, "CONTAINER_CREATED, not running"},
		{"exited", "exited", "1", codes.FailedPrecondition, "CONTAINER_EXITED, not running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.Signal(context.Background(), &crishimv1.SignalRequest{ContainerId: tt.id, Signal: tt.signal})
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("Signal: %v; want %s with %q", err, tt.code, tt.msg)
			}
		})
	}
}
