package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group, Version and Resources, for dynamic clients.
var (
	SchemeGroupVersion = schema.GroupVersion{Group: "crishim.io", Version: "v1alpha2"}
	Resource           = SchemeGroupVersion.WithResource("notifications")
	NodeResource       = SchemeGroupVersion.WithResource("nodenotifications")
	InboxResource      = SchemeGroupVersion.WithResource("notificationinboxes")
)

// Kinds.
const (
	Kind      = "Notification"
	NodeKind  = "NodeNotification"
	InboxKind = "NotificationInbox"
)

// Condition types of a Notification and the reasons the aggregator sets on them. Once True
// or False, a condition never changes again.
const (
	// ConditionTriggered is True once every selected pod's node has been given its work,
	// False (NoSelectedPods) when the selector picks no pod that declares the notifier.
	ConditionTriggered = "Triggered"
	// ConditionSucceeded is True when every selected pod succeeded, False as soon as one
	// failed (or nothing was selected).
	ConditionSucceeded = "Succeeded"
	// ConditionComplete is True when every selected pod has a result.
	ConditionComplete = "Complete"

	ReasonStarted        = "NotifierStarted"
	ReasonNoSelectedPods = "NoSelectedPods"
	ReasonAllSucceeded   = "AllSucceeded"
	ReasonFailed         = "NotifierFailed"
	ReasonAllFinished    = "AllFinished"
)

// Error types of a container's result, as in the proposal.
const (
	ErrorTypeTimeout = "Timeout"
	ErrorTypeError   = "Error"
)

// Reasons of pod results that no notifier run produced.
const (
	// ReasonNodeDidNotAnswer: the pod's node did not start its work in time; not run.
	ReasonNodeDidNotAnswer = "NodeDidNotAnswer"
	// ReasonResultLost: the node started but its result did not come in time.
	ReasonResultLost = "ResultLost"
	// ReasonInterrupted: the node's crishim restarted while the notifier ran; not run again.
	ReasonInterrupted = "Interrupted"
	// ReasonPodNotFound: the pod was not running on its node when the node started.
	ReasonPodNotFound = "PodNotFound"
	// ReasonNotifierMissing: the pod, as its node's runtime knows it, does not declare the
	// notifier.
	ReasonNotifierMissing = "NotifierMissing"
	// ReasonRunFailed: crishim could not run the notifier at all.
	ReasonRunFailed = "RunFailed"
)

// Labels on every NodeNotification: which Notification it belongs to, so its per-pod results
// are a label selector away (kubectl get nodenotifications -l crishim.io/notification-uid=UID).
const (
	LabelNotificationUID  = "crishim.io/notification-uid"
	LabelNotificationName = "crishim.io/notification" // only when the name fits a label value (63)
)

// Bounds. docs/notifications.md derives the largest object from them.
const (
	// MaxPodsPerNodeNotification: a node with more selected pods gets several objects.
	MaxPodsPerNodeNotification = 40
	// MaxFailedContainersShown per pod result; the rest are counted.
	MaxFailedContainersShown = 2
	// MaxFailuresShown in a Notification's status; the rest are counted.
	MaxFailuresShown = 10
	// MaxMessage bytes of any message crishim writes.
	MaxMessage = 128
	// MaxReason bytes of a reason.
	MaxReason = 64
	// MaxInboxShares a node's inbox lists at once, oldest first; later shares wait for a
	// place (42 Notifications at once on a node of 110 pods).
	MaxInboxShares = 128
)

// DefaultExpirationSeconds is spec.expirationSeconds when unset.
const DefaultExpirationSeconds = 3600

// Notification asks every node to run a container notifier in the pods its selector picks.
// Its status is written by the notification controller (the aggregator) alone.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=notif
// +kubebuilder:printcolumn:name="Notifier",type=string,JSONPath=`.spec.containerNotifierName`
// +kubebuilder:printcolumn:name="Selected",type=integer,JSONPath=`.status.selected`
// +kubebuilder:printcolumn:name="Started",type=integer,JSONPath=`.status.started`
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.succeeded`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failed`
// +kubebuilder:printcolumn:name="Result",type=string,JSONPath=`.status.conditions[?(@.type=="Succeeded")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Notification struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NotificationSpec   `json:"spec"`
	Status NotificationStatus `json:"status,omitempty"`
}

// NotificationSpec says which notifier runs where.
type NotificationSpec struct {
	// ContainerNotifierName is the <name> of the pod annotations
	// notifier.crishim.io/<container>.<name> that declare the notifier.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	ContainerNotifierName string `json:"containerNotifierName"`
	// PodSelector picks pods in the Notification's namespace.
	// +required
	PodSelector metav1.LabelSelector `json:"podSelector"`
	// ExpirationSeconds: a completed Notification older than this is deleted.
	// +kubebuilder:default=3600
	// +kubebuilder:validation:Minimum=600
	// +optional
	ExpirationSeconds *int64 `json:"expirationSeconds,omitempty"`
}

// NotificationStatus is the progress: counts of pods, the first failures, the conditions.
type NotificationStatus struct {
	// Nodes that have selected pods (each has one NodeNotification per 40 of them).
	// +optional
	Nodes int32 `json:"nodes"`
	// Selected pods: in the namespace, matching the selector, declaring the notifier, bound
	// to a node, and created before the Notification. Fixed once Triggered is set.
	// +optional
	Selected int32 `json:"selected"`
	// WithoutNotifier: pods the selector matched that declare no such notifier (not selected).
	// +optional
	WithoutNotifier int32 `json:"withoutNotifier,omitempty"`
	// Started: selected pods whose node started the notifier.
	// +optional
	Started int32 `json:"started"`
	// Succeeded: selected pods where the notifier succeeded in every declaring container.
	// +optional
	Succeeded int32 `json:"succeeded"`
	// Failed: selected pods with a result other than success, including pods never run
	// (their node did not answer in time, the pod was gone).
	// +optional
	Failed int32 `json:"failed"`
	// Failures: the first failed pods, earliest result first (ties by node, then pod name),
	// at most 10.
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	// +optional
	Failures []PodFailure `json:"failures,omitempty"`
	// FailuresNotShown counts the failed pods beyond Failures.
	// +optional
	FailuresNotShown int32 `json:"failuresNotShown,omitempty"`
	// Conditions: Triggered, Succeeded, Complete.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PodFailure is one failed pod, as shown in the Notification.
type PodFailure struct {
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`
	// +kubebuilder:validation:MaxLength=253
	PodName string `json:"podName"`
	// +kubebuilder:validation:MaxLength=36
	PodUID string `json:"podUID"`
	// ContainerName is the first failed container's, empty when the pod never ran.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	ContainerName string `json:"containerName,omitempty"`
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason"`
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// NotificationList is a list of Notifications.
//
// +kubebuilder:object:root=true
type NotificationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Notification `json:"items"`
}

// Phases of a NodeNotification's status.
const (
	// PhaseRunning: the node recorded that it starts (status.runner says which process).
	PhaseRunning = "Running"
	// PhaseFinished: the node recorded every pod's result.
	PhaseFinished = "Finished"
	// PhaseExpired: the aggregator recorded that the node did not start, or did not
	// finish, in time; its pods' results say so.
	PhaseExpired = "Expired"
)

// States of a pod result.
const (
	PodRunning   = "Running"
	PodSucceeded = "Succeeded"
	PodFailed    = "Failed"
)

// NodeNotification is one node's share of a Notification: up to 40 of its selected pods.
// The aggregator creates it (owned by the Notification, so deleting that deletes it) and
// lists it in the NotificationInbox of the node named in spec.nodeName; that node reads it
// and writes its status at most twice: when it starts, when it has finished. spec.nodeName
// is a selectable field, for operators (kubectl get nodenotifications --field-selector).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=nodenotif
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Notification",type=string,JSONPath=`.spec.notificationName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeNotification struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   NodeNotificationSpec   `json:"spec"`
	Status NodeNotificationStatus `json:"status,omitempty"`
}

// NodeNotificationSpec is the work: which notifier, in which pods of which node.
type NodeNotificationSpec struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName"`
	// +kubebuilder:validation:MaxLength=253
	NotificationName string `json:"notificationName"`
	// +kubebuilder:validation:MaxLength=36
	NotificationUID string `json:"notificationUID"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ContainerNotifierName string `json:"containerNotifierName"`
	// Pods to notify on the node.
	// +kubebuilder:validation:MaxItems=40
	// +listType=atomic
	Pods []PodRef `json:"pods"`
}

// PodRef names one pod.
type PodRef struct {
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=36
	UID string `json:"uid"`
}

// NodeNotificationStatus is the node's record of its work.
type NodeNotificationStatus struct {
	// +kubebuilder:validation:Enum=Running;Finished;Expired
	// +optional
	Phase string `json:"phase,omitempty"`
	// Runner is the crishim process that started the work (node name and a per-process
	// id): a process that finds Running with another runner knows a predecessor was cut off.
	// +kubebuilder:validation:MaxLength=300
	// +optional
	Runner string `json:"runner,omitempty"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Pods: one result per spec.pods entry, in the same order.
	// +kubebuilder:validation:MaxItems=40
	// +listType=atomic
	// +optional
	Pods []PodResult `json:"pods,omitempty"`
}

// PodResult is one pod's outcome.
type PodResult struct {
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=36
	UID string `json:"uid"`
	// +kubebuilder:validation:Enum=Running;Succeeded;Failed
	State string `json:"state"`
	// Reason and Message say why a pod failed as a whole (never run, result lost).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Reason string `json:"reason,omitempty"`
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Message string `json:"message,omitempty"`
	// Containers that declare the notifier; Succeeded of them succeeded.
	// +optional
	Containers int32 `json:"containers,omitempty"`
	// +optional
	Succeeded int32 `json:"succeeded,omitempty"`
	// FailedContainers: the first two failed containers, by name.
	// +kubebuilder:validation:MaxItems=2
	// +listType=atomic
	// +optional
	FailedContainers []ContainerFailure `json:"failedContainers,omitempty"`
}

// ContainerFailure is why a container's notifier did not succeed.
type ContainerFailure struct {
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// +kubebuilder:validation:Enum=Timeout;Error
	ErrorType string `json:"errorType"`
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Reason string `json:"reason,omitempty"`
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Message string `json:"message,omitempty"`
}

// NodeNotificationList is a list of NodeNotifications.
//
// +kubebuilder:object:root=true
type NodeNotificationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeNotification `json:"items"`
}

// NotificationInbox lists one node's NodeNotifications, newest last: it is named after the
// node and written by the notification controller alone. The node's crishim watches this
// one object by name (metadata.name=<node>), a watch the apiserver's watch cache indexes, so
// a share event is handed to one watcher and not filtered against every node's (a custom
// resource's selectable field has no such index); the node then reads each share it lists.
// Owned by its Node when that exists, so deleting the node deletes it.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=notifinbox
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NotificationInbox struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec NotificationInboxSpec `json:"spec"`
}

// NotificationInboxSpec is the node's work, by reference.
type NotificationInboxSpec struct {
	// Shares are the node's NodeNotifications not yet finished when the list was last
	// written (finished ones leave it at the next write), oldest first.
	// +kubebuilder:validation:MaxItems=128
	// +listType=atomic
	// +optional
	Shares []ShareRef `json:"shares"`
}

// ShareRef names one NodeNotification.
type ShareRef struct {
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=36
	UID string `json:"uid"`
}

// NotificationInboxList is a list of NotificationInboxes.
//
// +kubebuilder:object:root=true
type NotificationInboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NotificationInbox `json:"items"`
}
