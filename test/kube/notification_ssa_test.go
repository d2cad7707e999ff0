package kube

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/crishim/crishim/notification"
	"github.com/crishim/crishim/notification/v1alpha1"
)

// TestHundredNodesWritingAtOnceConverge proves the write scheme of docs/notifications.md on
// the real apiserver: 100 field managers ("nodes") write their own pod entry to one
// Notification's status at the same moment, each with the apply object crishim's controller
// sends (notification.ApplyObject: server-side apply, force, a failed write retried with
// backoff as its work queue does; 10 requests in flight at a time). Every node's run is
// recorded as started first; then all nodes record their results at once, each from the same
// view, in which every other node's entry still says "started" (as a lagging cache would
// show it). At the end every node's
// entry is there and is its result: no node's write lost or overwrote another's. When the
// apiserver times a request out, the retry is what a real node does then.
func TestHundredNodesWritingAtOnceConverge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dyn := dynamicClient(t, testNode.Kubeconfig)
	name := uniqueName("hundred")
	createNotification(t, name, "quiesce", name+"-nobody-selected")
	const nodes = 100
	started := metav1.NewTime(time.Now().Truncate(time.Second))
	entry := func(i int, done bool) v1alpha1.PodNotificationStatus {
		node := fmt.Sprintf("node-%03d", i)
		return v1alpha1.PodNotificationStatus{PodName: "pod-" + node, PodUID: "uid-" + node, NodeName: node,
			ContainerNotificationStatuses: []v1alpha1.ContainerNotificationStatus{{ContainerName: "main", Timestamp: &started, Succeed: done}}}
	}

	// Every node's started entry, in one write: what the apiserver holds once each node has
	// recorded its start, and what every node's view shows when the results are written.
	all := map[string]v1alpha1.PodNotificationStatus{}
	for i := range nodes {
		all[entry(i, false).PodUID] = entry(i, false)
	}
	created, err := getNotification(ctx, dyn, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := applyAsNode(ctx, dyn, "started", nil, func() (*v1alpha1.Notification, error) { return created, nil }, all); err != nil {
		t.Fatalf("record the starts: %v", err)
	}
	view, err := getNotification(ctx, dyn, name)
	if err != nil {
		t.Fatal(err)
	}

	// At most 10 of the 100 requests in flight at once: beyond that the apiserver of this
	// shared 2-core bed times requests out faster than backoff recovers them. Ten writers on
	// one object still race: each write's resourceVersion is stale by the time it lands, and
	// the apiserver merges it onto the newer object.
	slots := make(chan struct{}, 10)
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	start := make(chan struct{})
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := entry(i, true)
			<-start
			if err := applyAsNode(ctx, dyn, e.NodeName, slots, func() (*v1alpha1.Notification, error) { return view, nil }, map[string]v1alpha1.PodNotificationStatus{e.PodUID: e}); err != nil {
				errs <- fmt.Errorf("%s: %w", e.NodeName, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("apply: %v", err)
	}

	// Read with a context of its own: what the writes left is worth seeing even when some
	// ran out of time.
	readCtx, cancelRead := context.WithTimeout(context.Background(), time.Minute)
	defer cancelRead()
	n, err := getNotification(readCtx, dyn, name)
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]bool{}
	for _, e := range n.Status.PodNotificationStatuses {
		results[e.NodeName] = len(e.ContainerNotificationStatuses) == 1 && e.ContainerNotificationStatuses[0].Succeed
	}
	lost, overwritten := 0, 0
	for i := range nodes {
		done, ok := results[entry(i, true).NodeName]
		switch {
		case !ok:
			lost++
		case !done:
			overwritten++
		}
	}
	if lost > 0 || overwritten > 0 || len(results) != nodes {
		t.Errorf("of %d nodes' results, %d lost and %d overwritten by an older entry; %d entries", nodes, lost, overwritten, len(results))
	}
}

// applyAsNode writes node's entries (mine, by pod UID) as its controller does: from its view
// of the Notification, with ApplyObject, and on failure retries with backoff until ctx ends,
// as its work queue would.
// Each request takes one of slots, when given, for as long as it is in flight.
func applyAsNode(ctx context.Context, dyn dynamic.Interface, node string, slots chan struct{}, view func() (*v1alpha1.Notification, error), mine map[string]v1alpha1.PodNotificationStatus) error {
	var err error
	for delay := 200 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		var n *v1alpha1.Notification
		if n, err = view(); err == nil {
			u, aerr := notification.ApplyObject(n, mine, time.Now())
			if aerr != nil {
				return aerr
			}
			if slots != nil {
				slots <- struct{}{}
			}
			_, err = dyn.Resource(v1alpha1.Resource).Namespace(n.Namespace).ApplyStatus(ctx, n.Name, u, metav1.ApplyOptions{FieldManager: "crishim/" + node, Force: true})
			if slots != nil {
				<-slots
			}
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(delay):
		}
	}
}

// getNotification reads one Notification of the default namespace from the apiserver.
func getNotification(ctx context.Context, dyn dynamic.Interface, name string) (*v1alpha1.Notification, error) {
	u, err := dyn.Resource(v1alpha1.Resource).Namespace("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var n v1alpha1.Notification
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &n); err != nil {
		return nil, fmt.Errorf("decode notification %s: %w", name, err)
	}
	return &n, nil
}
