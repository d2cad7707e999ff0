package notification

import (
	"context"
	"fmt"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/crishim/crishim/notification/v1alpha1"
)

// apply writes this node's view into the Notification's status by server-side apply with a
// field manager of its own ("crishim/<node>"): its pod entries (the list is a map keyed by
// podUID, so each node owns its own entries and leaves the others' alone) and the conditions
// computed from every node's entries with its own replaced by mine. Applying everything it
// owns each time matters: a field a manager stops sending is removed.
//
// Why apply and not patches: with list-map keys the apiserver merges 100 nodes' entries
// without a conflict or a retry loop, which a read-modify-write patch of a shared list would
// need under contention.
func (c *Controller) apply(ctx context.Context, n *v1alpha1.Notification, mine map[string]v1alpha1.PodNotificationStatus) error {
	u, err := ApplyObject(n, mine, time.Now())
	if err != nil {
		return err
	}
	_, err = c.o.Dynamic.Resource(v1alpha1.Resource).Namespace(n.Namespace).
		ApplyStatus(ctx, n.Name, u, metav1.ApplyOptions{FieldManager: c.manager, Force: true})
	if err != nil {
		c.o.Metrics.APIError("apply")
		return fmt.Errorf("apply status of notification %s/%s: %w", n.Namespace, n.Name, err)
	}
	return nil
}

// ApplyObject is the apply configuration a node sends: identity (with the UID, so a
// Notification deleted and recreated under the same name is never written with an old one's
// entries), the node's entries (mine, by pod UID), and the conditions computed from n's
// entries with mine replacing their older copies. Exported for the tests that prove the
// write scheme on a real apiserver (test/kube): they must send what a node sends.
func ApplyObject(n *v1alpha1.Notification, mine map[string]v1alpha1.PodNotificationStatus, now time.Time) (*unstructured.Unstructured, error) {
	merged := mergeEntries(n.Status.PodNotificationStatuses, mine)
	own := make([]v1alpha1.PodNotificationStatus, 0, len(mine))
	for _, e := range mine {
		own = append(own, e)
	}
	sortEntries(own)
	status := v1alpha1.NotificationStatus{
		PodNotificationStatuses: own,
		Conditions:              conditions(merged, n.Spec.ContainerNotifierName, n.Generation, n.Status.Conditions, now),
	}
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		return nil, fmt.Errorf("encode status: %w", err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": st}}
	u.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
	u.SetKind(v1alpha1.Kind)
	u.SetNamespace(n.Namespace)
	u.SetName(n.Name)
	u.SetUID(n.UID)
	return u, nil
}

// mergeEntries is all entries with the node's own replaced or added.
func mergeEntries(all []v1alpha1.PodNotificationStatus, mine map[string]v1alpha1.PodNotificationStatus) []v1alpha1.PodNotificationStatus {
	var out []v1alpha1.PodNotificationStatus
	for _, e := range all {
		if _, ok := mine[e.PodUID]; !ok {
			out = append(out, e)
		}
	}
	for _, e := range mine {
		out = append(out, e)
	}
	sortEntries(out)
	return out
}

func sortEntries(es []v1alpha1.PodNotificationStatus) {
	sort.Slice(es, func(i, j int) bool { return es[i].PodUID < es[j].PodUID })
}
