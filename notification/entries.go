package notification

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/notification/v1alpha1"
	"github.com/crishim/crishim/shim/crishimv1"
)

// Reasons crishim gives for entries that no notifier run produced.
const (
	// reasonInterrupted: the entry said "started" but its node's crishim restarted before
	// the result was written. The run is not repeated: no retries, as the proposal says.
	reasonInterrupted = "Interrupted"
	// reasonRunFailed: crishim could not run the notifier at all (runtime unreachable...).
	reasonRunFailed = "RunFailed"
)

// startedEntry is the entry written before a pod's notifier runs: its existence is the
// record that makes the run happen once, even across a crishim restart.
func startedEntry(p *runtimeapi.PodSandbox, node string, containers []string, now time.Time) v1alpha1.PodNotificationStatus {
	e := podEntry(p, node)
	t := metav1.NewTime(now)
	for _, c := range containers {
		e.ContainerNotificationStatuses = append(e.ContainerNotificationStatuses, v1alpha1.ContainerNotificationStatus{ContainerName: c, Timestamp: &t})
	}
	return e
}

func podEntry(p *runtimeapi.PodSandbox, node string) v1alpha1.PodNotificationStatus {
	return v1alpha1.PodNotificationStatus{PodName: p.GetMetadata().GetName(), PodUID: p.GetMetadata().GetUid(), NodeName: node}
}

// resultEntry turns crishim's Notify answer for one pod into its entry.
func resultEntry(p *runtimeapi.PodSandbox, node string, pn *crishimv1.PodNotification, now time.Time) v1alpha1.PodNotificationStatus {
	e := podEntry(p, node)
	for _, c := range pn.GetContainers() {
		s := v1alpha1.ContainerNotificationStatus{ContainerName: c.GetContainerName(), Succeed: c.GetSucceeded()}
		if ts := c.GetStartedAt(); ts != nil {
			t := metav1.NewTime(ts.AsTime())
			s.Timestamp = &t
		}
		if err := c.GetError(); err != nil && !c.GetSucceeded() {
			t := metav1.NewTime(now)
			s.Error = &v1alpha1.NotificationError{ErrorType: err.GetType(), Reason: err.GetReason(), Message: err.GetMessage(), Timestamp: &t}
			if s.Error.ErrorType != v1alpha1.ErrorTypeTimeout {
				s.Error.ErrorType = v1alpha1.ErrorTypeError
			}
		}
		e.ContainerNotificationStatuses = append(e.ContainerNotificationStatuses, s)
	}
	return e
}

// failedEntry marks every container of an entry failed with reason and message, keeping the
// start times: for a run crishim could not do or whose result was lost.
func failedEntry(e v1alpha1.PodNotificationStatus, reason, msg string, now time.Time) v1alpha1.PodNotificationStatus {
	t := metav1.NewTime(now)
	out := e
	out.ContainerNotificationStatuses = nil
	for _, c := range e.ContainerNotificationStatuses {
		if !c.Succeed && c.Error == nil {
			c.Error = &v1alpha1.NotificationError{ErrorType: v1alpha1.ErrorTypeError, Reason: reason, Message: msg, Timestamp: &t}
		}
		out.ContainerNotificationStatuses = append(out.ContainerNotificationStatuses, c)
	}
	return out
}

// pending: started, no result yet.
func pending(e v1alpha1.PodNotificationStatus) bool {
	for _, c := range e.ContainerNotificationStatuses {
		if !c.Succeed && c.Error == nil {
			return true
		}
	}
	return false
}
