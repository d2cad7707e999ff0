package kube

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/crishim/crishim/notification/v1alpha1"
)

// TestHundredNodesWritingAtOnceConverge proves the write scheme of docs/notifications.md on
// the real apiserver: 100 field managers ("nodes") apply their own pod entry to one
// Notification's status at the same moment, each the way crishim's controller applies
// (server-side apply, force, only its own entries, a failed write retried with backoff as
// its work queue does), and every entry is there at the end: none is lost to another node's
// write. On this 2-core test machine the apiserver times some of the 100 simultaneous
// requests out; the retries are what a real node does then.
func TestHundredNodesWritingAtOnceConverge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dyn := dynamicClient(t, testNode.Kubeconfig)
	name := uniqueName("hundred")
	createNotification(t, name, "quiesce", name+"-nobody-selected")
	res := dyn.Resource(v1alpha1.Resource).Namespace("default")
	const nodes = 100
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	start := make(chan struct{})
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("node-%03d", i)
			ts := metav1.Now()
			status := v1alpha1.NotificationStatus{PodNotificationStatuses: []v1alpha1.PodNotificationStatus{{
				PodName: "pod-" + node, PodUID: "uid-" + node, NodeName: node,
				ContainerNotificationStatuses: []v1alpha1.ContainerNotificationStatus{{ContainerName: "main", Timestamp: &ts, Succeed: true}},
			}}}
			st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
			if err != nil {
				errs <- err
				return
			}
			u := &unstructured.Unstructured{Object: map[string]any{"status": st}}
			u.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
			u.SetKind(v1alpha1.Kind)
			u.SetName(name)
			<-start
			for attempt, delay := 0, 200*time.Millisecond; attempt < 8; attempt, delay = attempt+1, delay*2 {
				if _, err = res.ApplyStatus(ctx, name, u, metav1.ApplyOptions{FieldManager: "crishim/" + node, Force: true}); err == nil {
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(delay):
				}
			}
			errs <- fmt.Errorf("%s: %w", node, err)
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("apply: %v", err)
	}
	n := waitNotification(t, ctx, dyn, name, func(n *v1alpha1.Notification) bool { return len(n.Status.PodNotificationStatuses) >= nodes })
	seen := map[string]bool{}
	for _, e := range n.Status.PodNotificationStatuses {
		seen[e.NodeName] = true
	}
	if len(seen) != nodes {
		t.Errorf("%d nodes' entries survived, want %d", len(seen), nodes)
	}
}
