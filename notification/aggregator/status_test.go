package aggregator

import (
	"testing"
	"time"

	"github.com/crishim/crishim/notification/v1alpha2"
)

// TestFailedMessageNamesWhatFailed: Succeeded=False's message names the first failed pod,
// with its container when one ran, and not a dangling "pod/" when the pod failed as a whole.
func TestFailedMessageNamesWhatFailed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result v1alpha2.PodResult
		want   string
	}{
		{"container failed", v1alpha2.PodResult{Name: "db", UID: "u", State: v1alpha2.PodFailed, Containers: 1,
			FailedContainers: []v1alpha2.ContainerFailure{{Name: "main", ErrorType: "Error", Reason: "ActionFailed", Message: "exit 3"}}},
			"1 of 1 pod(s) failed so far; first: db/main on node-a: ActionFailed: exit 3"},
		{"pod failed as a whole", v1alpha2.PodResult{Name: "db", UID: "u", State: v1alpha2.PodFailed, Reason: v1alpha2.ReasonPodNotFound, Message: "no sandbox"},
			"1 of 1 pod(s) failed so far; first: db on node-a: PodNotFound: no sandbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := notification()
			nn := &v1alpha2.NodeNotification{Spec: v1alpha2.NodeNotificationSpec{NodeName: "node-a", Pods: []v1alpha2.PodRef{{Name: "db", UID: "u"}}},
				Status: v1alpha2.NodeNotificationStatus{Phase: v1alpha2.PhaseFinished, Pods: []v1alpha2.PodResult{tc.result}}}
			n.Status = summarize(n, []*v1alpha2.NodeNotification{nn}, time.Now())
			if got := condition(n, v1alpha2.ConditionSucceeded).Message; got != tc.want {
				t.Errorf("message %q, want %q", got, tc.want)
			}
		})
	}
}
