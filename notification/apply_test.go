package notification

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/crishim/crishim/notification/v1alpha1"
)

// TestApplyObjectCarriesOnlyOwnEntries: a node's apply names only its own pod entries (so
// server-side apply leaves the other nodes' alone) but computes the conditions from all of
// them, with its own newest.
func TestApplyObjectCarriesOnlyOwnEntries(t *testing.T) {
	n := &v1alpha1.Notification{
		ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "ns", UID: "u1", Generation: 2},
		Spec:       v1alpha1.NotificationSpec{ContainerNotifierName: "quiesce"},
		Status: v1alpha1.NotificationStatus{PodNotificationStatuses: []v1alpha1.PodNotificationStatus{
			entry("b", "p2", failed), entry("a", "p1", running),
		}},
	}
	mine := map[string]v1alpha1.PodNotificationStatus{"uid-p1": entry("a", "p1", ok)}
	u, err := ApplyObject(n, mine, time.Unix(1000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if u.GetUID() != "u1" || u.GetName() != "q" || u.GetNamespace() != "ns" || u.GetKind() != "Notification" || u.GetAPIVersion() != "crishim.io/v1alpha1" {
		t.Errorf("identity %s %s/%s %s %s", u.GetUID(), u.GetNamespace(), u.GetName(), u.GetKind(), u.GetAPIVersion())
	}
	entries, _, _ := unstructured.NestedSlice(u.Object, "status", "podNotificationStatuses")
	if len(entries) != 1 || entries[0].(map[string]any)["nodeName"] != "a" {
		t.Fatalf("applied entries %v, want only node a's", entries)
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var succeeded map[string]any
	for _, c := range conds {
		if m := c.(map[string]any); m["type"] == v1alpha1.ConditionSucceeded {
			succeeded = m
		}
	}
	if succeeded["status"] != "False" || succeeded["reason"] != v1alpha1.ReasonFailed {
		t.Errorf("Succeeded %v: node b's failure must count though b's entry is not applied", succeeded)
	}
}

// TestOverlayResults: what this process wrote replaces a stale cached "started" entry of the
// same Notification, even after the cache had caught up once (a relist can go back), and is
// forgotten when the Notification is deleted.
func TestOverlayResults(t *testing.T) {
	key := resultKey{"n1", "uid-p1"}
	c := &Controller{results: map[resultKey]v1alpha1.PodNotificationStatus{key: entry("a", "p1", ok)}}
	for range 2 {
		mine := map[string]v1alpha1.PodNotificationStatus{"uid-p1": entry("a", "p1", running)}
		c.overlayResults("n1", mine)
		if !mine["uid-p1"].ContainerNotificationStatuses[0].Succeed {
			t.Errorf("stale started entry kept: %+v", mine["uid-p1"])
		}
		c.overlayResults("n1", map[string]v1alpha1.PodNotificationStatus{"uid-p1": entry("a", "p1", ok)})
	}
	other := map[string]v1alpha1.PodNotificationStatus{"uid-p1": entry("a", "p1", running)}
	c.overlayResults("n2", other)
	if other["uid-p1"].ContainerNotificationStatuses[0].Succeed {
		t.Error("another Notification's result was used")
	}
	u := &unstructured.Unstructured{}
	u.SetUID("n1")
	c.forget(u)
	if len(c.results) != 0 {
		t.Errorf("results of a deleted Notification kept: %v", c.results)
	}
}

func TestFailedEntryKeepsFinishedContainers(t *testing.T) {
	e := failedEntry(entry("a", "p1", ok, v1alpha1.ContainerNotificationStatus{ContainerName: "side"}), reasonInterrupted, "restarted", time.Unix(1, 0))
	if e.ContainerNotificationStatuses[0].Error != nil || !e.ContainerNotificationStatuses[0].Succeed {
		t.Errorf("a finished container was marked failed: %+v", e.ContainerNotificationStatuses[0])
	}
	if err := e.ContainerNotificationStatuses[1].Error; err == nil || err.Reason != reasonInterrupted || err.ErrorType != v1alpha1.ErrorTypeError {
		t.Errorf("the unfinished container: %+v", err)
	}
	if pending(e) {
		t.Error("still pending after failedEntry")
	}
}
