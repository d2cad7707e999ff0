package notification

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crishim/crishim/notification/v1alpha1"
)

func entry(node, pod string, containers ...v1alpha1.ContainerNotificationStatus) v1alpha1.PodNotificationStatus {
	return v1alpha1.PodNotificationStatus{PodName: pod, PodUID: "uid-" + pod, NodeName: node, ContainerNotificationStatuses: containers}
}

var (
	ok      = v1alpha1.ContainerNotificationStatus{ContainerName: "main", Succeed: true}
	running = v1alpha1.ContainerNotificationStatus{ContainerName: "main"}
	failed  = v1alpha1.ContainerNotificationStatus{ContainerName: "main", Error: &v1alpha1.NotificationError{ErrorType: "Error", Reason: "ActionFailed", Message: "exited with code 3"}}
	timeout = v1alpha1.ContainerNotificationStatus{ContainerName: "main", Error: &v1alpha1.NotificationError{ErrorType: "Timeout", Reason: "ActionTimeout", Message: "did not finish within 1s"}}
)

func TestConditions(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name                       string
		entries                    []v1alpha1.PodNotificationStatus
		triggered, succeeded       metav1.ConditionStatus
		triggeredWhy, succeededWhy string
		msg                        string
	}{
		{name: "nothing selected", triggered: metav1.ConditionFalse, triggeredWhy: v1alpha1.ReasonNoSelectedPods,
			succeeded: metav1.ConditionFalse, succeededWhy: v1alpha1.ReasonNoSelectedPods, msg: `no selected pod declares notifier "quiesce"`},
		{name: "two nodes succeeded", entries: []v1alpha1.PodNotificationStatus{entry("a", "p1", ok), entry("b", "p2", ok)},
			triggered: metav1.ConditionTrue, triggeredWhy: v1alpha1.ReasonStarted, succeeded: metav1.ConditionTrue, succeededWhy: v1alpha1.ReasonAllSucceeded,
			msg: "succeeded in all 2 container(s) of 2 pod(s)"},
		{name: "one still running", entries: []v1alpha1.PodNotificationStatus{entry("a", "p1", ok), entry("b", "p2", running)},
			triggered: metav1.ConditionTrue, triggeredWhy: v1alpha1.ReasonStarted, succeeded: metav1.ConditionUnknown, succeededWhy: v1alpha1.ReasonInProgress,
			msg: "1 of 2 container(s) still running"},
		{name: "a failure wins over running", entries: []v1alpha1.PodNotificationStatus{entry("a", "p1", failed), entry("b", "p2", running)},
			triggered: metav1.ConditionTrue, triggeredWhy: v1alpha1.ReasonStarted, succeeded: metav1.ConditionFalse, succeededWhy: v1alpha1.ReasonFailed,
			msg: "p1/main: Error ActionFailed: exited with code 3"},
		{name: "a timeout is a failure", entries: []v1alpha1.PodNotificationStatus{entry("a", "p1", ok), entry("a", "p2", timeout)},
			triggered: metav1.ConditionTrue, triggeredWhy: v1alpha1.ReasonStarted, succeeded: metav1.ConditionFalse, succeededWhy: v1alpha1.ReasonFailed,
			msg: "p2/main: Timeout ActionTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := conditions(tc.entries, "quiesce", 3, nil, now)
			tr, su := meta.FindStatusCondition(got, v1alpha1.ConditionTriggered), meta.FindStatusCondition(got, v1alpha1.ConditionSucceeded)
			if tr == nil || su == nil {
				t.Fatalf("conditions %+v lack Triggered or Succeeded", got)
			}
			if tr.Status != tc.triggered || tr.Reason != tc.triggeredWhy || su.Status != tc.succeeded || su.Reason != tc.succeededWhy {
				t.Errorf("Triggered %s/%s Succeeded %s/%s, want %s/%s %s/%s", tr.Status, tr.Reason, su.Status, su.Reason, tc.triggered, tc.triggeredWhy, tc.succeeded, tc.succeededWhy)
			}
			if !strings.Contains(tr.Message+" "+su.Message, tc.msg) {
				t.Errorf("messages %q / %q lack %q", tr.Message, su.Message, tc.msg)
			}
			if su.ObservedGeneration != 3 {
				t.Errorf("observedGeneration %d, want 3", su.ObservedGeneration)
			}
		})
	}
}

// TestConditionsConverge: nodes that see the same entries in any order compute the same
// conditions, so their writes settle instead of alternating; and an unchanged status keeps
// its transition time.
func TestConditionsConverge(t *testing.T) {
	es := []v1alpha1.PodNotificationStatus{entry("a", "p1", ok), entry("b", "p2", failed), entry("c", "p3", ok)}
	rev := slices.Clone(es)
	slices.Reverse(rev)
	first := conditions(es, "quiesce", 1, nil, time.Unix(1000, 0))
	second := conditions(rev, "quiesce", 1, nil, time.Unix(2000, 0))
	if !sameConditions(first, second) {
		t.Errorf("order changed the conditions:\n%+v\n%+v", first, second)
	}
	again := conditions(es, "quiesce", 1, first, time.Unix(3000, 0))
	if c := meta.FindStatusCondition(again, v1alpha1.ConditionSucceeded); !c.LastTransitionTime.Equal(&metav1.Time{Time: time.Unix(1000, 0)}) {
		t.Errorf("lastTransitionTime moved to %v without a status change", c.LastTransitionTime)
	}
}

func TestExpiry(t *testing.T) {
	created := time.Unix(10_000, 0)
	n := &v1alpha1.Notification{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}
	if got := expiresIn(n, created.Add(time.Hour-time.Second), 0); got != time.Second {
		t.Errorf("default expiry: %v left, want 1s", got)
	}
	s := int64(600)
	n.Spec.ExpirationSeconds = &s
	if got := expiresIn(n, created.Add(601*time.Second), 0); got > 0 {
		t.Errorf("600 s expiry after 601 s: %v left", got)
	}
	if got := expiresIn(n, created.Add(2*time.Second), 5*time.Second); got != 3*time.Second {
		t.Errorf("test override: %v left, want 3s", got)
	}
	n.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionUnknown}}
	if completed(n) {
		t.Error("in progress counted as completed")
	}
	n.Status.Conditions[0].Status = metav1.ConditionFalse
	if !completed(n) {
		t.Error("failed not counted as completed")
	}
}
