package shim

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestStreamRequestValidation(t *testing.T) {
	tests := []struct {
		name    string
		check   error
		wantMsg string // "" means valid
	}{
		{"exec: stdout only", validateExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"ls"}, Stdout: true}), ""},
		{"exec: stdin only", validateExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"cat"}, Stdin: true}), ""},
		{"exec: tty with stdin and stdout", validateExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"sh"}, Tty: true, Stdin: true, Stdout: true}), ""},
		{"exec: no container", validateExec(&runtimeapi.ExecRequest{Cmd: []string{"ls"}, Stdout: true}), "container_id"},
		{"exec: no command", validateExec(&runtimeapi.ExecRequest{ContainerId: "c", Stdout: true}), "cmd"},
		{"exec: no stream", validateExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"ls"}}), "one of stdin, stdout and stderr"},
		{"exec: tty and stderr", validateExec(&runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"ls"}, Tty: true, Stdout: true, Stderr: true}), "tty and stderr"},
		{"attach: stdout and stderr", validateAttach(&runtimeapi.AttachRequest{ContainerId: "c", Stdout: true, Stderr: true}), ""},
		{"attach: no container", validateAttach(&runtimeapi.AttachRequest{Stdout: true}), "container_id"},
		{"attach: no stream", validateAttach(&runtimeapi.AttachRequest{ContainerId: "c"}), "one of stdin"},
		{"attach: tty and stderr", validateAttach(&runtimeapi.AttachRequest{ContainerId: "c", Tty: true, Stderr: true}), "tty and stderr"},
		{"portforward: ports", validatePortForward(&runtimeapi.PortForwardRequest{PodSandboxId: "p", Port: []int32{1, 8080, 65535}}), ""},
		{"portforward: no ports (SPDY names them later)", validatePortForward(&runtimeapi.PortForwardRequest{PodSandboxId: "p"}), ""},
		{"portforward: no sandbox", validatePortForward(&runtimeapi.PortForwardRequest{Port: []int32{80}}), "pod_sandbox_id"},
		{"portforward: port 0", validatePortForward(&runtimeapi.PortForwardRequest{PodSandboxId: "p", Port: []int32{80, 0}}), "port[1] = 0"},
		{"portforward: port too big", validatePortForward(&runtimeapi.PortForwardRequest{PodSandboxId: "p", Port: []int32{65536}}), "port[0] = 65536"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.wantMsg == "" {
				if tt.check != nil {
					t.Fatalf("refused: %v", tt.check)
				}
				return
			}
			if status.Code(tt.check) != codes.InvalidArgument || !strings.Contains(status.Convert(tt.check).Message(), tt.wantMsg) {
				t.Fatalf("got %v, want InvalidArgument naming %q", tt.check, tt.wantMsg)
			}
		})
	}
}
