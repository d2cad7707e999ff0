package shim

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/allowlist"
	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/shim/crishimv1"
)

// TestAuditDebugContainers: a debug container create, allowed or refused,
// is a started and an ended event, the end naming the container or the
// refusal.
func TestAuditDebugContainers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := audit.Open(audit.Config{Path: path}, metrics.NewAudit(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	policy, err := allowlist.New("registry.corp/debug/*", "")
	if err != nil {
		t.Fatal(err)
	}
	f := newTargetFake()
	f.add("app", "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
	s := New(serveFakeRuntimeAndImages(t, f, newFakeImages()), Options{PIDTargetMode: PIDTargetNative, DebugImages: policy, Audit: l})
	s.target.pidNamespace = f.pidNamespace
	for _, img := range []string{"registry.corp/debug/tools:v1", "busybox:latest"} {
		req := targetRequest("pod1", "app")
		req.Config.Image = &runtimeapi.ImageSpec{Image: img}
		req.Config.Command = []string{"sh"}
		req.SandboxConfig = &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "shop", Uid: "u1"}}
		_, _ = s.createContainer(context.Background(), req)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d events, want 4:\n%s", len(lines), b)
	}
	var evs []audit.Event
	for _, line := range lines {
		var ev audit.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Kind != audit.KindDebug || ev.PodNamespace != "shop" || ev.PodName != "web" || ev.PodUID != "u1" || ev.TargetID != "app" || ev.Argv[0] != "sh" {
			t.Errorf("event lacks the pod, target or argv: %s", line)
		}
		evs = append(evs, ev)
	}
	if evs[0].ID != evs[1].ID || evs[1].Code != "OK" || evs[1].ContainerID != "ctr1" || evs[1].Image != "registry.corp/debug/tools:v1" {
		t.Errorf("allowed create: %+v / %+v", evs[0], evs[1])
	}
	if evs[2].ID != evs[3].ID || evs[3].Code != "PermissionDenied" || !strings.Contains(evs[3].Error, "--debug-image-allowlist") || evs[3].ContainerID != "" {
		t.Errorf("refused create: %+v", evs[3])
	}
}

// TestAuditNotifyNamesThePodByItsFullID: Notify by a pod ID prefix writes
// the pod's full ID in its started event, as Signal does for containers.
func TestAuditNotifyNamesThePodByItsFullID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := audit.Open(audit.Config{Path: path}, metrics.NewAudit(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f := newTargetFake()
	f.podAnnotations = map[string]map[string]string{"pod1abcdef": nil}
	s := New(serveFakeRuntimeAndImages(t, f, newFakeImages()), Options{PIDTargetMode: PIDTargetNative, Audit: l})
	// No container declares the notifier: the call fails, after its started event.
	if _, err := s.API().Notify(context.Background(), &crishimv1.NotifyRequest{Notifier: "reload", PodSandboxId: "pod1"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Notify: %v, want NotFound (no notifier declared)", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var ev audit.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Kind != audit.KindNotify || ev.PodSandboxID != "pod1abcdef" {
			t.Errorf("event does not name the pod by its full ID: %s", line)
		}
	}
}

// TestAuditRequiredRefusesSessions: with --audit-required and an audit log that cannot be
// written, new sessions are refused with Unavailable naming the log and the cause, before
// anything reaches the runtime: debug containers, Signal, Notify, exec, attach and
// port-forward URLs. Once the log can be written, they go through again.
func TestAuditRequiredRefusesSessions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := audit.Open(audit.Config{Path: path, Required: true}, metrics.NewAudit(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	f := newTargetFake()
	f.add("app", "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
	s := New(serveFakeRuntimeAndImages(t, f, newFakeImages()), Options{PIDTargetMode: PIDTargetNative, Audit: l})
	s.target.pidNamespace = f.pidNamespace
	a := s.API()
	ctx := context.Background()
	debug := func() error {
		req := targetRequest("pod1", "app")
		req.Config.Image = &runtimeapi.ImageSpec{Image: "busybox:latest"}
		_, err := s.createContainer(ctx, req)
		return err
	}
	// The audit log's path becomes a directory: no event can be written.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"debug container": debug,
		"Signal": func() error {
			_, err := a.Signal(ctx, &crishimv1.SignalRequest{ContainerId: "app", Signal: "SIGHUP"})
			return err
		},
		"Notify": func() error {
			_, err := a.Notify(ctx, &crishimv1.NotifyRequest{Notifier: "reload", PodSandboxId: "pod1"})
			return err
		},
		"Exec": func() error {
			_, err := s.exec(ctx, &runtimeapi.ExecRequest{ContainerId: "app", Cmd: []string{"sh"}, Stdout: true})
			return err
		},
		"Attach": func() error {
			_, err := s.attach(ctx, &runtimeapi.AttachRequest{ContainerId: "app", Stdout: true})
			return err
		},
		"PortForward": func() error {
			_, err := s.portForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "pod1", Port: []int32{80}})
			return err
		},
	} {
		err := call()
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "--audit-required") {
			t.Errorf("%s while the audit log cannot be written: %v, want Unavailable naming %s", name, err, path)
		}
	}
	f.mu.Lock()
	creates := len(f.creates)
	f.mu.Unlock()
	if creates != 0 {
		t.Errorf("%d refused debug containers reached the runtime", creates)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := debug(); err != nil {
		t.Errorf("debug container once the log can be written: %v", err)
	}
}
