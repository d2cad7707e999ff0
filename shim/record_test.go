package shim

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
)

// TestPodRecordMode: the container's pod sandbox annotation is what the
// pod asks for; a missing pod, container or a bad value asks for nothing.
func TestPodRecordMode(t *testing.T) {
	f := newTargetFake()
	f.podAnnotations = map[string]map[string]string{
		"pod-tty":  {audit.RecordAnnotation: "tty"},
		"pod-all":  {audit.RecordAnnotation: "all"},
		"pod-bad":  {audit.RecordAnnotation: "everything"},
		"pod-none": {"other": "x"},
	}
	for _, id := range []string{"pod-tty", "pod-all", "pod-bad", "pod-none", "pod-gone"} {
		f.add("c-"+id, id, runtimeapi.ContainerState_CONTAINER_RUNNING)
	}
	s := New(serveFakeRuntimeAndImages(t, f, newFakeImages()), Options{})
	tests := []struct {
		container string
		want      audit.RecordMode
	}{
		{"c-pod-tty", audit.RecordTTY},
		{"c-pod-all", audit.RecordAll},
		{"c-pod-bad", ""},
		{"c-pod-none", ""},
		{"c-pod-gone", ""},
		{"no-such-container", ""},
	}
	for _, tt := range tests {
		if got := s.podRecordMode(context.Background(), tt.container); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.container, got, tt.want)
		}
	}
}
