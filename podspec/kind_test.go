package podspec

import (
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

func pod(name, uid string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"namespace": "ns", "name": name, "uid": uid},
		"spec": map[string]any{
			"initContainers":      []any{map[string]any{"name": "init"}},
			"containers":          []any{map[string]any{"name": "app"}},
			"ephemeralContainers": []any{map[string]any{"name": "debugger-x1"}},
		},
	}}
}

func TestKind(t *testing.T) {
	dyn := fake.NewSimpleDynamicClient(runtime.NewScheme(), pod("web", "uid-1"))
	s := New(dyn)
	tests := []struct {
		name, pod, uid, container string
		want                      Kind
		err                       string
	}{
		{"regular", "web", "uid-1", "app", Regular, ""},
		{"init", "web", "uid-1", "init", Regular, ""},
		{"ephemeral", "web", "uid-1", "debugger-x1", Ephemeral, ""},
		{"no such container", "web", "uid-1", "other", Unknown, ""},
		{"another pod of that name", "web", "uid-2", "debugger-x1", Unknown, "UID uid-1, the kubelet's uid-2"},
		{"no such pod", "gone", "uid-3", "app", Unknown, "not in the API server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Kind(context.Background(), "ns", tt.pod, tt.uid, tt.container)
			if got != tt.want || (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("Kind = %v, %v; want %v, error containing %q", got, err, tt.want, tt.err)
			}
		})
	}
}

func TestKindAPIServerError(t *testing.T) {
	dyn := fake.NewSimpleDynamicClient(runtime.NewScheme())
	dyn.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	got, err := New(dyn).Kind(context.Background(), "ns", "web", "uid-1", "app")
	if got != Unknown || err == nil || !strings.Contains(err.Error(), "pod ns/web: connection refused") {
		t.Errorf("Kind = %v, %v; want Unknown and the error", got, err)
	}
}
