package aggregator

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/crishim/crishim/notification/v1alpha2"
)

// slimPod is the pod informer's transform: only what selection reads is kept (name, UID,
// labels, the notifier annotations, node, phase, creation time), so the aggregator's cache
// of 150,000 pods holds a few hundred bytes each instead of whole pod specs.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown: its object was slimmed when cached
	}
	var ann map[string]string
	for k, v := range p.Annotations {
		if strings.HasPrefix(k, v1alpha2.NotifierAnnotationPrefix) {
			if ann == nil {
				ann = map[string]string{}
			}
			ann[k] = v
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, Labels: p.Labels, Annotations: ann,
			CreationTimestamp: p.CreationTimestamp, ResourceVersion: p.ResourceVersion, DeletionTimestamp: p.DeletionTimestamp},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}, nil
}

// selection is a Notification's selected pods by node, and the matched pods without the
// notifier.
type selection struct {
	byNode          map[string][]v1alpha2.PodRef
	withoutNotifier int32
}

// selectPods applies the rule of docs/notifications.md: pods of the namespace that match the
// selector, are bound to a node, not finished, and were created before the Notification
// (creation times have whole seconds: the same second counts as before); those that declare
// the notifier are selected, the others counted.
func selectPods(n *v1alpha2.Notification, pods []*corev1.Pod) (selection, error) {
	sel, err := metav1.LabelSelectorAsSelector(&n.Spec.PodSelector)
	if err != nil {
		return selection{}, fmt.Errorf("spec.podSelector: %w", err)
	}
	created := n.CreationTimestamp.Add(time.Second)
	s := selection{byNode: map[string][]v1alpha2.PodRef{}}
	for _, p := range pods {
		if p.Namespace != n.Namespace || p.Spec.NodeName == "" || !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if !n.CreationTimestamp.IsZero() && !p.CreationTimestamp.Time.Before(created) {
			continue
		}
		if len(v1alpha2.DeclaringContainers(p.Annotations, n.Spec.ContainerNotifierName)) == 0 {
			s.withoutNotifier++
			continue
		}
		s.byNode[p.Spec.NodeName] = append(s.byNode[p.Spec.NodeName], v1alpha2.PodRef{Name: p.Name, UID: string(p.UID)})
	}
	for _, refs := range s.byNode {
		sort.Slice(refs, func(i, j int) bool { return refs[i].UID < refs[j].UID })
	}
	return s, nil
}

// shards cuts a node's pods into NodeNotification-sized pieces.
func shards(refs []v1alpha2.PodRef) [][]v1alpha2.PodRef {
	var out [][]v1alpha2.PodRef
	for len(refs) > 0 {
		k := min(len(refs), v1alpha2.MaxPodsPerNodeNotification)
		out = append(out, refs[:k])
		refs = refs[k:]
	}
	return out
}
