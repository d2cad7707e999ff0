package node

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/crishim/crishim/test/harness"
)

// TestBedController: the bed's notification controller is the shipped manifest with only
// hostNetwork and the apiserver's loopback address added, and the shipped manifest stays
// right for a real cluster (no hostNetwork, no apiserver address, the image `make image`
// builds).
func TestBedController(t *testing.T) {
	dir, err := manifestsDir()
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join(dir, controllerManifest))
	if err != nil {
		t.Fatal(err)
	}
	bed, err := bedController(shipped, 6443)
	if err != nil {
		t.Fatal(err)
	}
	a, b := decodeAll(t, shipped), decodeAll(t, bed)
	if len(a) != len(b) {
		t.Fatalf("bed manifest has %d objects, the shipped one %d", len(b), len(a))
	}
	for i := range a {
		if a[i].GetKind() != b[i].GetKind() || a[i].GetName() != b[i].GetName() {
			t.Errorf("object %d: %s %s, shipped %s %s", i, b[i].GetKind(), b[i].GetName(), a[i].GetKind(), a[i].GetName())
		}
		if a[i].GetKind() == "Deployment" {
			ship, mine := deployment(t, a[i]), deployment(t, b[i])
			c := ship.Spec.Template.Spec.Containers[0]
			if ship.Spec.Template.Spec.HostNetwork || c.Image != harness.NotificationControllerImage || len(ship.Spec.Template.Spec.Containers) != 1 {
				t.Errorf("shipped Deployment: hostNetwork %v, image %s", ship.Spec.Template.Spec.HostNetwork, c.Image)
			}
			for _, e := range c.Env {
				if e.Name == "KUBERNETES_SERVICE_HOST" || e.Name == "KUBERNETES_SERVICE_PORT" {
					t.Errorf("shipped Deployment sets %s", e.Name)
				}
			}
			mc := mine.Spec.Template.Spec.Containers[0]
			env := map[string]string{}
			for _, e := range mc.Env {
				env[e.Name] = e.Value
			}
			if !mine.Spec.Template.Spec.HostNetwork || env["KUBERNETES_SERVICE_HOST"] != "127.0.0.1" || env["KUBERNETES_SERVICE_PORT"] != "6443" || len(mc.Env) != len(c.Env)+2 {
				t.Errorf("bed Deployment: hostNetwork %v, env %v", mine.Spec.Template.Spec.HostNetwork, mc.Env)
			}
			// Nothing else differs.
			mine.Spec.Template.Spec.HostNetwork = false
			mine.Spec.Template.Spec.Containers[0].Env = mc.Env[:len(c.Env)]
			if !apiequality.Semantic.DeepEqual(ship, mine) {
				t.Errorf("bed Deployment differs from the shipped one beyond hostNetwork and the apiserver's address")
			}
		} else if !reflect.DeepEqual(a[i].Object, b[i].Object) {
			t.Errorf("%s %s changed", a[i].GetKind(), a[i].GetName())
		}
	}
}

func decodeAll(t *testing.T, data []byte) []unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []unstructured.Unstructured
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func deployment(t *testing.T, u unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}
