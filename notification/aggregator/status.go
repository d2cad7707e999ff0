package aggregator

import (
	"fmt"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crishim/crishim/notification/v1alpha2"
)

// failure is one failed pod with what orders it among the others.
type failure struct {
	v1alpha2.PodFailure
	at time.Time
}

// summarize computes the Notification's status from its NodeNotifications: counts summed,
// the first MaxFailuresShown failed pods (earliest result first, then node, then pod name)
// and the rest counted, and the conditions, which once True or False are kept as they are
// (old): a status never goes back, whatever view it is computed from.
func summarize(n *v1alpha2.Notification, children []*v1alpha2.NodeNotification, now time.Time) v1alpha2.NotificationStatus {
	st := v1alpha2.NotificationStatus{WithoutNotifier: n.Status.WithoutNotifier, Conditions: append([]metav1.Condition(nil), n.Status.Conditions...)}
	nodes := map[string]bool{}
	var failures []failure
	for _, c := range children {
		nodes[c.Spec.NodeName] = true
		sel, started, ok, bad := c.Counts()
		st.Selected += sel
		st.Started += started
		st.Succeeded += ok
		st.Failed += bad
		var at time.Time
		if c.Status.FinishedAt != nil {
			at = c.Status.FinishedAt.Time
		}
		for _, p := range c.Status.Pods {
			if p.State != v1alpha2.PodFailed {
				continue
			}
			f := failure{PodFailure: v1alpha2.PodFailure{NodeName: c.Spec.NodeName, PodName: p.Name, PodUID: p.UID, Reason: p.Reason, Message: p.Message}, at: at}
			if len(p.FailedContainers) > 0 {
				fc := p.FailedContainers[0]
				f.ContainerName, f.Reason, f.Message = fc.Name, fc.Reason, fc.Message
				if f.Reason == "" {
					f.Reason = fc.ErrorType
				}
			}
			if c.Status.FinishedAt != nil {
				t := *c.Status.FinishedAt
				f.FinishedAt = &t
			}
			failures = append(failures, f)
		}
	}
	st.Nodes = int32(len(nodes))
	sort.Slice(failures, func(i, j int) bool {
		a, b := failures[i], failures[j]
		if !a.at.Equal(b.at) {
			return a.at.Before(b.at)
		}
		if a.NodeName != b.NodeName {
			return a.NodeName < b.NodeName
		}
		return a.PodName < b.PodName
	})
	for i, f := range failures {
		if i == v1alpha2.MaxFailuresShown {
			st.FailuresNotShown = int32(len(failures) - i)
			break
		}
		st.Failures = append(st.Failures, f.PodFailure)
	}

	notifier := n.Spec.ContainerNotifierName
	set := func(typ string, s metav1.ConditionStatus, reason, msg string) {
		if c := meta.FindStatusCondition(st.Conditions, typ); c != nil && c.Status != metav1.ConditionUnknown {
			return // decided: never goes back
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason,
			Message: v1alpha2.Bound(msg, 256), ObservedGeneration: n.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	if st.Selected == 0 {
		msg := fmt.Sprintf("no selected pod declares notifier %q (pod annotation notifier.crishim.io/<container>.%s)", notifier, notifier)
		set(v1alpha2.ConditionTriggered, metav1.ConditionFalse, v1alpha2.ReasonNoSelectedPods, msg)
		set(v1alpha2.ConditionSucceeded, metav1.ConditionFalse, v1alpha2.ReasonNoSelectedPods, msg)
		set(v1alpha2.ConditionComplete, metav1.ConditionTrue, v1alpha2.ReasonNoSelectedPods, msg)
		return st
	}
	set(v1alpha2.ConditionTriggered, metav1.ConditionTrue, v1alpha2.ReasonStarted,
		fmt.Sprintf("notifier %q requested in %d pod(s) on %d node(s)", notifier, st.Selected, st.Nodes))
	switch {
	case st.Failed > 0:
		f := st.Failures[0]
		where := f.PodName // a pod that failed as a whole (PodNotFound, NodeDidNotAnswer...) names no container
		if f.ContainerName != "" {
			where += "/" + f.ContainerName
		}
		set(v1alpha2.ConditionSucceeded, metav1.ConditionFalse, v1alpha2.ReasonFailed,
			fmt.Sprintf("%d of %d pod(s) failed so far; first: %s on %s: %s: %s", st.Failed, st.Selected, where, f.NodeName, f.Reason, f.Message))
	case st.Succeeded == st.Selected:
		set(v1alpha2.ConditionSucceeded, metav1.ConditionTrue, v1alpha2.ReasonAllSucceeded,
			fmt.Sprintf("notifier %q succeeded in all %d pod(s)", notifier, st.Selected))
	default:
		set(v1alpha2.ConditionSucceeded, metav1.ConditionUnknown, "InProgress", "")
	}
	if st.Succeeded+st.Failed == st.Selected {
		set(v1alpha2.ConditionComplete, metav1.ConditionTrue, v1alpha2.ReasonAllFinished,
			fmt.Sprintf("every selected pod has a result: %d succeeded, %d failed", st.Succeeded, st.Failed))
	} else {
		set(v1alpha2.ConditionComplete, metav1.ConditionUnknown, "InProgress", "")
	}
	return st
}

// sameStatus: nothing a reader sees differs (times of unchanged conditions aside).
func sameStatus(a, b v1alpha2.NotificationStatus) bool {
	if a.Nodes != b.Nodes || a.Selected != b.Selected || a.WithoutNotifier != b.WithoutNotifier || a.Started != b.Started ||
		a.Succeeded != b.Succeeded || a.Failed != b.Failed || a.FailuresNotShown != b.FailuresNotShown ||
		len(a.Failures) != len(b.Failures) || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for i := range a.Failures {
		x, y := a.Failures[i], b.Failures[i]
		if x.NodeName != y.NodeName || x.PodUID != y.PodUID || x.Reason != y.Reason || x.Message != y.Message || x.ContainerName != y.ContainerName {
			return false
		}
	}
	for _, c := range a.Conditions {
		o := meta.FindStatusCondition(b.Conditions, c.Type)
		if o == nil || o.Status != c.Status || o.Reason != c.Reason || o.Message != c.Message {
			return false
		}
	}
	return true
}

// decided: Triggered is set, so the selection is fixed and the shares exist.
func decided(n *v1alpha2.Notification) bool {
	return meta.FindStatusCondition(n.Status.Conditions, v1alpha2.ConditionTriggered) != nil
}

// complete: every selected pod has a result.
func complete(n *v1alpha2.Notification) bool {
	return meta.IsStatusConditionTrue(n.Status.Conditions, v1alpha2.ConditionComplete)
}

// expiresIn is how long until a complete Notification may be deleted (<= 0: now).
func expiresIn(n *v1alpha2.Notification, now time.Time, gcAfter time.Duration) time.Duration {
	after := time.Duration(v1alpha2.DefaultExpirationSeconds) * time.Second
	if s := n.Spec.ExpirationSeconds; s != nil {
		after = time.Duration(*s) * time.Second
	}
	if gcAfter > 0 {
		after = gcAfter
	}
	return n.CreationTimestamp.Add(after).Sub(now)
}
