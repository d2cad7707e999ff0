package main

import (
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestDebugImage: a debug container names its image as the kubelet and
// crictl do, with the name a person gave in user_specified_image (CRI-O
// requires it under a signature policy).
func TestDebugImage(t *testing.T) {
	kubeletMade := &runtimeapi.Container{
		ImageRef: "sha256:0b1c",
		Image:    &runtimeapi.ImageSpec{Image: "sha256:0b1c", UserSpecifiedImage: "docker.io/library/busybox:latest"},
	}
	tests := []struct {
		name   string
		asked  string
		target *runtimeapi.Container
		want   *runtimeapi.ImageSpec
	}{
		{"asked for", "docker.io/library/alpine:3", kubeletMade,
			&runtimeapi.ImageSpec{Image: "docker.io/library/alpine:3", UserSpecifiedImage: "docker.io/library/alpine:3"}},
		{"the target's, made by the kubelet", "", kubeletMade,
			&runtimeapi.ImageSpec{Image: "sha256:0b1c", UserSpecifiedImage: "docker.io/library/busybox:latest"}},
		{"the target's, made without a user-specified name", "", &runtimeapi.Container{ImageRef: "sha256:0b1c", Image: &runtimeapi.ImageSpec{Image: "busybox:latest"}},
			&runtimeapi.ImageSpec{Image: "sha256:0b1c", UserSpecifiedImage: "busybox:latest"}},
		{"the target's, no image ref", "", &runtimeapi.Container{Image: &runtimeapi.ImageSpec{Image: "busybox:latest"}},
			&runtimeapi.ImageSpec{Image: "busybox:latest", UserSpecifiedImage: "busybox:latest"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := debugImage(tt.asked, tt.target); !proto.Equal(got, tt.want) {
				t.Errorf("debugImage = %v, want %v", got, tt.want)
			}
		})
	}
}
