package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/shim/crishimv1"
)

// crishimAPI is a client of crishim's own API on its socket.
func crishimAPI(t *testing.T, endpoint string) crishimv1.CrishimClient {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return crishimv1.NewCrishimClient(conn)
}

// crishimctl runs the CLI against endpoint.
func crishimctl(t *testing.T, endpoint string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "crishimctl"), append([]string{"--endpoint", endpoint, "--timeout", "30s"}, args...)...).CombinedOutput()
	return string(out), err
}

// TestSignalAPI: SIGHUP reaches a container's init process exactly once,
// through the containerd API and, with it disabled, through a pidfd.
func TestSignalAPI(t *testing.T) {
	for _, path := range []struct {
		via   string
		flags []string
	}{
		{"containerd", nil},
		{"pidfd", []string{"--containerd-address", ""}},
	} {
		t.Run(path.via, func(t *testing.T) {
			if path.via == "containerd" {
				needContainerdAPI(t)
			}
			auditPath := filepath.Join(t.TempDir(), "audit.log")
			p := startCrishim(t, testbed.Endpoint, append([]string{"--audit-log", auditPath}, path.flags...)...)
			rs, _ := criClients(t, p.Endpoint)
			pod := podConfig(t, uniqueName("signal-"+path.via), nil)
			podID := runPod(t, rs, pod)
			dir, id := trappingContainer(t, rs, podID, pod, "reloader", runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "", "HUP", "USR2")

			out, err := crishimctl(t, p.Endpoint, "signal", id[:12], "SIGHUP")
			if err != nil {
				t.Fatalf("crishimctl signal: %v\n%s", err, out)
			}
			if want := fmt.Sprintf("sent SIGHUP (1) to container %s via %s", id, path.via); !strings.Contains(out, want) {
				t.Errorf("crishimctl signal printed %q; want %q", out, want)
			}
			// Both of its audit events name the container by its full ID,
			// though the operator typed a prefix.
			for _, stage := range []string{audit.StageStarted, audit.StageEnded} {
				ev := auditEvent(t, auditPath, "the signal's "+stage+" event", func(ev audit.Event) bool {
					return ev.Kind == audit.KindSignal && ev.Stage == stage
				})
				if ev.ContainerID != id || ev.PodSandboxID != podID {
					t.Errorf("signal %s event names container %q of pod %q; want %q of %q", stage, ev.ContainerID, ev.PodSandboxID, id, podID)
				}
			}
			// USR2 is a barrier: once its line is there, a second HUP sent
			// with the first would have been handled too.
			resp, err := crishimAPI(t, p.Endpoint).Signal(context.Background(), &crishimv1.SignalRequest{ContainerId: id, Signal: "12"})
			if err != nil || resp.GetSignal() != "SIGUSR2" || resp.GetVia() != path.via || resp.GetPodSandboxId() != podID {
				t.Fatalf("Signal 12: %v, %v", resp, err)
			}
			eventually(t, "USR2 handled", func() error {
				if lines := signalLines(t, dir); count(lines, "USR2") != 1 {
					return fmt.Errorf("signals: %q", lines)
				}
				return nil
			})
			if lines := signalLines(t, dir); count(lines, "HUP") != 1 {
				t.Errorf("signals received: %q; want HUP exactly once", lines)
			}
			if m := metricsText(t, p.Metrics); !strings.Contains(m, `crishim_signal_deliveries_total{code="OK",origin="api",signal="SIGHUP",via="`+path.via+`"} 1`) {
				t.Errorf("delivery not counted")
			}
		})
	}
}

func TestSignalAPIErrors(t *testing.T) {
	p := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, p.Endpoint)
	pod := podConfig(t, uniqueName("signal-errors"), nil)
	podID := runPod(t, rs, pod)
	runningID := startContainer(t, rs, podID, pod, containerConfig("running", "exec sleep 3600", nil))
	exitedID := startContainer(t, rs, podID, pod, containerConfig("exited", "true", nil))
	waitState(t, rs, exitedID, runtimeapi.ContainerState_CONTAINER_EXITED)
	createdID, err := rs.CreateContainer(context.Background(), podID, containerConfig("created", "exec sleep 3600", nil), pod)
	if err != nil {
		t.Fatal(err)
	}
	api := crishimAPI(t, p.Endpoint)
	tests := []struct {
		name, id, signal string
		code             codes.Code
		msg              string
	}{
		{"unknown signal name", runningID, "SIGNOPE", codes.InvalidArgument, "signal:"},
		{"unknown signal number", runningID, "99", codes.InvalidArgument, "signal:"},
		{"no container", "", "SIGHUP", codes.InvalidArgument, "container_id"},
		{"unknown container", "0123456789abcdef", "SIGHUP", codes.NotFound, "container_id"},
		{"exited container", exitedID, "SIGHUP", codes.FailedPrecondition, "not running"},
		{"created, never started", createdID, "SIGHUP", codes.FailedPrecondition, "not running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := api.Signal(context.Background(), &crishimv1.SignalRequest{ContainerId: tt.id, Signal: tt.signal})
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Fatalf("Signal: %v; want %s with %q", err, tt.code, tt.msg)
			}
		})
	}
	if out, err := crishimctl(t, p.Endpoint, "signal", "0123456789abcdef", "HUP"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("crishimctl signal to an unknown container: %v\n%s", err, out)
	}
}
