package podspec

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Kind is what a container is in its pod's spec.
type Kind int

const (
	// Unknown: the pod could not be read, is another pod of that name (its
	// UID differs), or names no such container.
	Unknown Kind = iota
	// Regular: one of spec.containers or spec.initContainers.
	Regular
	// Ephemeral: one of spec.ephemeralContainers.
	Ephemeral
)

func (k Kind) String() string {
	switch k {
	case Regular:
		return "regular"
	case Ephemeral:
		return "ephemeral"
	}
	return "unknown"
}

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// lookupTimeout bounds one GET: a CreateContainer waits on it.
const lookupTimeout = 5 * time.Second

// Source reads pods from the API server, with the node's credentials (the
// Node authorizer lets a node read the pods bound to it).
type Source struct {
	pods dynamic.NamespaceableResourceInterface
}

// New returns a Source reading through dyn.
func New(dyn dynamic.Interface) *Source {
	return &Source{pods: dyn.Resource(podsResource)}
}

// Kind reads the pod namespace/name and says what container is in it. The
// pod is read fresh each time (no cache): ephemeral containers are added to
// a running pod, and the kubelet creates one as soon as it sees it, so a
// cached spec could be older than the kubelet's. uid guards against a pod
// deleted and created again under the same name. An error says why the
// answer is Unknown.
func (s *Source) Kind(ctx context.Context, namespace, name, uid, container string) (Kind, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	pod, err := s.pods.Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Unknown, fmt.Errorf("pod %s/%s: not in the API server", namespace, name)
	}
	if err != nil {
		return Unknown, fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	if got := string(pod.GetUID()); uid != "" && got != uid {
		return Unknown, fmt.Errorf("pod %s/%s: the API server's has UID %s, the kubelet's %s", namespace, name, got, uid)
	}
	return kindIn(pod, container), nil
}

// kindIn finds container among the pod's containers by name: names are
// unique across all three lists (API validation).
func kindIn(pod *unstructured.Unstructured, container string) Kind {
	for _, list := range []struct {
		field string
		kind  Kind
	}{{"containers", Regular}, {"initContainers", Regular}, {"ephemeralContainers", Ephemeral}} {
		items, _, _ := unstructured.NestedSlice(pod.Object, "spec", list.field)
		for _, it := range items {
			if c, ok := it.(map[string]any); ok && c["name"] == container {
				return list.kind
			}
		}
	}
	return Unknown
}
