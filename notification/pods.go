package notification

import (
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/notification/v1alpha1"
)

// notifierAnnotationPrefix is how pod owners declare notifiers (shim.NotifierAnnotationPrefix;
// repeated as a constant here so this package does not import the CRI service layer).
const notifierAnnotationPrefix = "notifier.crishim.io/"

// selectedPods picks this node's pods a Notification is about: ready sandboxes in its
// namespace whose labels match its selector, that existed when it was created (a pod that
// appears later was not asked about, and a run can never be repeated by recreating a pod), and that declare the notifier in a container.
// Labels, namespace and annotations come from the CRI sandbox metadata the kubelet wrote:
// no pod list from the apiserver is needed.
func selectedPods(n *v1alpha1.Notification, pods []*runtimeapi.PodSandbox) ([]*runtimeapi.PodSandbox, error) {
	sel, err := metav1.LabelSelectorAsSelector(&n.Spec.PodSelector)
	if err != nil {
		return nil, fmt.Errorf("spec.podSelector: %w", err)
	}
	// creationTimestamp has whole seconds: a pod made in the same second as the
	// Notification counts as existing before it.
	created := n.CreationTimestamp.Add(time.Second).UnixNano()
	var out []*runtimeapi.PodSandbox
	for _, p := range pods {
		if p.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY || p.GetMetadata().GetNamespace() != n.Namespace {
			continue
		}
		if !n.CreationTimestamp.IsZero() && p.GetCreatedAt() >= created {
			continue
		}
		if !sel.Matches(labels.Set(p.GetLabels())) || len(declaringContainers(p.GetAnnotations(), n.Spec.ContainerNotifierName)) == 0 {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// declaringContainers names, sorted, the pod's containers that declare the notifier.
func declaringContainers(annotations map[string]string, notifier string) []string {
	var out []string
	for k := range annotations {
		// <container>.<name>: container names are DNS labels, so the first dot splits.
		rest, ok := strings.CutPrefix(k, notifierAnnotationPrefix)
		if ctr, name, found := strings.Cut(rest, "."); ok && found && name == notifier {
			out = append(out, ctr)
		}
	}
	sort.Strings(out)
	return out
}
