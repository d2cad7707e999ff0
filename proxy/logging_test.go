package proxy

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestCallLevels(t *testing.T) {
	for _, tc := range []struct {
		err         error
		intercepted bool
		want        slog.Level
	}{
		{nil, false, slog.LevelDebug},
		{nil, true, slog.LevelInfo},
		{status.Error(codes.NotFound, "gone"), false, slog.LevelDebug},
		{status.Error(codes.NotFound, "gone"), true, slog.LevelInfo},
		{status.Error(codes.Unavailable, "down"), false, slog.LevelWarn},
		{status.Error(codes.Internal, "bug"), true, slog.LevelWarn},
		{status.Error(codes.Unimplemented, "optional"), false, slog.LevelDebug},
	} {
		if got := callLevel(status.Code(tc.err), tc.intercepted); got != tc.want {
			t.Errorf("callLevel(%v, %v) = %v, want %v", tc.err, tc.intercepted, got, tc.want)
		}
	}
}

func TestLogUnaryNamesContainerAndPod(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	intercept := LogUnary(log)
	req := &runtimeapi.CreateContainerRequest{PodSandboxId: "pod-1"}
	_, _ = intercept(context.Background(), req, &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/CreateContainer"},
		func(context.Context, any) (any, error) { return nil, status.Error(codes.Unavailable, "runtime down") })
	_, _ = intercept(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: "ctr-1"}, &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/StartContainer"},
		func(context.Context, any) (any, error) { return nil, nil })
	_, _ = intercept(context.Background(), &runtimeapi.ExecSyncRequest{ContainerId: "probed"}, &grpc.UnaryServerInfo{FullMethod: "/runtime.v1.RuntimeService/ExecSync"},
		func(context.Context, any) (any, error) { return nil, nil })
	out := buf.String()
	if strings.Contains(out, "probed") {
		t.Errorf("ExecSync, the kubelet's exec probes, logged at info:\n%s", out)
	}
	for _, want := range []string{"level=WARN", "pod=pod-1", "code=Unavailable", `err="runtime down"`, "level=INFO", "container=ctr-1", "code=OK", "duration="} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
