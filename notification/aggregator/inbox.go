package aggregator

import (
	"context"
	"fmt"
	"slices"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/crishim/crishim/notification/v1alpha2"
)

// Each node's NotificationInbox lists its unfinished shares. A node watches its inbox by
// name, which the apiserver's watch cache indexes: a share's creation reaches that one node
// and costs the apiserver O(1), where a watch on the shares by their selectable field had
// every share event filtered against every node's watch (O(N) each, O(N²) a Notification).

// byNode indexes NodeNotifications by spec.nodeName.
const byNode = "node-name"

func shareNode(obj any) string {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return ""
	}
	node, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName")
	return node
}

// shareOpen: not yet Finished or Expired (not started, or Running).
func shareOpen(u *unstructured.Unstructured) bool {
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	return phase == "" || phase == v1alpha2.PhaseRunning
}

// nextInbox handles one node's inbox from the queue.
func (c *Controller) nextInbox(ctx context.Context) bool {
	node, quit := c.inboxQueue.Get()
	if quit {
		return false
	}
	defer c.inboxQueue.Done(node)
	if err := c.reconcileInbox(ctx, node); err != nil {
		c.log.Warn("notification: inbox: will retry", "node", node, "err", err)
		c.inboxQueue.AddRateLimited(node)
		return true
	}
	c.inboxQueue.Forget(node)
	return true
}

// wantedShares are the node's shares not finished, oldest first, at most MaxInboxShares: a
// share past that waits for a place (a listed share finishing requeues the node).
func (c *Controller) wantedShares(node string) ([]v1alpha2.ShareRef, error) {
	objs, err := c.shares.GetIndexer().ByIndex(byNode, node)
	if err != nil {
		return nil, err
	}
	type open struct {
		ref     v1alpha2.ShareRef
		created metav1.Time
	}
	var todo []open
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if !shareOpen(u) {
			continue
		}
		todo = append(todo, open{v1alpha2.ShareRef{Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID())}, u.GetCreationTimestamp()})
	}
	sort.Slice(todo, func(i, j int) bool {
		if !todo[i].created.Equal(&todo[j].created) {
			return todo[i].created.Before(&todo[j].created)
		}
		return todo[i].ref.Namespace+"/"+todo[i].ref.Name < todo[j].ref.Namespace+"/"+todo[j].ref.Name
	})
	refs := make([]v1alpha2.ShareRef, 0, min(len(todo), v1alpha2.MaxInboxShares))
	for _, t := range todo[:min(len(todo), v1alpha2.MaxInboxShares)] {
		refs = append(refs, t.ref)
	}
	return refs, nil
}

// reconcileInbox writes the node's inbox when a share it should list is missing from it.
// Finished shares leave it only then, with the next write: removing each as it finishes
// would double the writes and the node's watch events, and a finished share listed costs
// the node nothing (it remembers what it finished; after a restart, one read each).
func (c *Controller) reconcileInbox(ctx context.Context, node string) error {
	want, err := c.wantedShares(node)
	if err != nil {
		return err
	}
	obj, exists, err := c.inboxes.GetIndexer().GetByKey(node)
	if err != nil {
		return err
	}
	res := c.o.Dynamic.Resource(v1alpha2.InboxResource)
	if !exists {
		if len(want) == 0 {
			return nil
		}
		in := &v1alpha2.NotificationInbox{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.SchemeGroupVersion.String(), Kind: v1alpha2.InboxKind},
			ObjectMeta: metav1.ObjectMeta{Name: node, OwnerReferences: c.nodeOwner(ctx, node)},
			Spec:       v1alpha2.NotificationInboxSpec{Shares: want},
		}
		u, err := toUnstructured(in)
		if err != nil {
			return err
		}
		if _, err := res.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			// AlreadyExists: the cache is behind a create; the retry reads it.
			return fmt.Errorf("create the inbox of node %s: %w", node, err)
		}
		return nil
	}
	var in v1alpha2.NotificationInbox
	if err := decode(obj, &in); err != nil {
		return err
	}
	if listsAll(in.Spec.Shares, want) {
		return nil
	}
	in.Spec.Shares = want
	in.APIVersion, in.Kind = v1alpha2.SchemeGroupVersion.String(), v1alpha2.InboxKind
	out, err := toUnstructured(&in)
	if err != nil {
		return err
	}
	// Conditional on the resourceVersion read: a write from a stale cache is refused (409)
	// and retried on the newer view.
	if _, err := res.Update(ctx, out, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update the inbox of node %s: %w", node, err)
	}
	return nil
}

func listsAll(have, want []v1alpha2.ShareRef) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// nodeOwner makes the Node, when there is one, own its inbox: deleting the node deletes it
// (the garbage collector). Read once per inbox created. Without a Node (not registered yet,
// or a simulated one) the inbox has no owner: an owner reference to an absent object would
// have the garbage collector delete it.
func (c *Controller) nodeOwner(ctx context.Context, node string) []metav1.OwnerReference {
	if c.o.Kube == nil {
		return nil
	}
	n, err := c.o.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			c.log.Warn("notification: inbox without an owner: could not read its Node", "node", node, "err", err)
		}
		return nil
	}
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}
}

// inboxFull reports whether the node's inbox, as cached, has no place left: a share
// finishing then makes room for one waiting.
func (c *Controller) inboxFull(node string) bool {
	obj, exists, err := c.inboxes.GetIndexer().GetByKey(node)
	if err != nil || !exists {
		return false
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return false
	}
	shares, _, _ := unstructured.NestedSlice(u.Object, "spec", "shares")
	return len(shares) >= v1alpha2.MaxInboxShares
}
