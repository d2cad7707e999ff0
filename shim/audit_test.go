package shim

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/allowlist"
	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/metrics"
)

// TestAuditDebugContainers: a debug container create, allowed or refused,
// is a started and an ended event, the end naming the container or the
// refusal.
func TestAuditDebugContainers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := audit.Open(audit.Config{Path: path}, metrics.NewAudit(), slog.New(slog.DiscardHandler))
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
