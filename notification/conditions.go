package notification

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crishim/crishim/notification/v1alpha1"
)

// conditions computes Triggered and Succeeded from the status's pod entries. Every node
// computes the same answer from the same entries (nothing node-specific goes into them), so
// nodes that each write what they computed converge instead of fighting; times carry over
// from old when a condition's status is unchanged.
func conditions(entries []v1alpha1.PodNotificationStatus, notifier string, generation int64, old []metav1.Condition, now time.Time) []metav1.Condition {
	out := append([]metav1.Condition(nil), old...)
	set := func(typ string, st metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&out, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg,
			ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now)})
	}
	if len(entries) == 0 {
		msg := fmt.Sprintf("no selected pod declares notifier %q (pod annotation notifier.crishim.io/<container>.%s)", notifier, notifier)
		set(v1alpha1.ConditionTriggered, metav1.ConditionFalse, v1alpha1.ReasonNoSelectedPods, msg)
		set(v1alpha1.ConditionSucceeded, metav1.ConditionFalse, v1alpha1.ReasonNoSelectedPods, msg)
		return out
	}
	nodes := map[string]bool{}
	var failed []string
	running, containers := 0, 0
	for _, p := range entries {
		nodes[p.NodeName] = true
		for _, c := range p.ContainerNotificationStatuses {
			containers++
			switch {
			case c.Error != nil:
				failed = append(failed, fmt.Sprintf("%s/%s: %s %s: %s", p.PodName, c.ContainerName, c.Error.ErrorType, c.Error.Reason, c.Error.Message))
			case !c.Succeed:
				running++
			}
		}
	}
	set(v1alpha1.ConditionTriggered, metav1.ConditionTrue, v1alpha1.ReasonStarted,
		fmt.Sprintf("notifier %q started in %d container(s) of %d pod(s) on %d node(s)", notifier, containers, len(entries), len(nodes)))
	switch {
	case len(failed) > 0:
		sort.Strings(failed)
		set(v1alpha1.ConditionSucceeded, metav1.ConditionFalse, v1alpha1.ReasonFailed,
			fmt.Sprintf("%d of %d container(s) failed: %s", len(failed), containers, strings.Join(failed, "; ")))
	case running > 0:
		set(v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, v1alpha1.ReasonInProgress,
			fmt.Sprintf("%d of %d container(s) still running the notifier", running, containers))
	default:
		set(v1alpha1.ConditionSucceeded, metav1.ConditionTrue, v1alpha1.ReasonAllSucceeded,
			fmt.Sprintf("notifier %q succeeded in all %d container(s) of %d pod(s)", notifier, containers, len(entries)))
	}
	return out
}

// sameConditions compares what a person reads: type, status, reason and message.
func sameConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for _, c := range a {
		o := meta.FindStatusCondition(b, c.Type)
		if o == nil || o.Status != c.Status || o.Reason != c.Reason || o.Message != c.Message || o.ObservedGeneration != c.ObservedGeneration {
			return false
		}
	}
	return true
}

// completed: Succeeded is True or False (nothing runs any more).
func completed(n *v1alpha1.Notification) bool {
	c := meta.FindStatusCondition(n.Status.Conditions, v1alpha1.ConditionSucceeded)
	return c != nil && c.Status != metav1.ConditionUnknown
}

// expiresIn is how long until a completed Notification may be deleted (<= 0: now). gcAfter,
// when set, replaces spec.expirationSeconds (a test-only flag: the API's minimum is 600 s).
func expiresIn(n *v1alpha1.Notification, now time.Time, gcAfter time.Duration) time.Duration {
	after := time.Duration(v1alpha1.DefaultExpirationSeconds) * time.Second
	if s := n.Spec.ExpirationSeconds; s != nil {
		after = time.Duration(*s) * time.Second
	}
	if gcAfter > 0 {
		after = gcAfter
	}
	return n.CreationTimestamp.Add(after).Sub(now)
}
