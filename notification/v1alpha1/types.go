package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group, Version and Resource of Notifications, for dynamic clients.
var (
	SchemeGroupVersion = schema.GroupVersion{Group: "crishim.io", Version: "v1alpha1"}
	Resource           = SchemeGroupVersion.WithResource("notifications")
)

// Kind is the Notification kind.
const Kind = "Notification"

// Condition types and the reasons crishim sets on them.
const (
	// ConditionTriggered is True once some node has started the notifier in a pod.
	ConditionTriggered = "Triggered"
	// ConditionSucceeded is True when every pod entry succeeded, False as soon as one failed.
	ConditionSucceeded = "Succeeded"

	ReasonStarted        = "NotifierStarted"
	ReasonNoSelectedPods = "NoSelectedPods"
	ReasonInProgress     = "InProgress"
	ReasonAllSucceeded   = "AllSucceeded"
	ReasonFailed         = "NotifierFailed"
)

// Error types of a container's entry, as in the proposal.
const (
	ErrorTypeTimeout = "Timeout"
	ErrorTypeError   = "Error"
)

// DefaultExpirationSeconds is spec.expirationSeconds when unset.
const DefaultExpirationSeconds = 3600

// Notification asks every node to run a container notifier in the pods its selector picks.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=notif
// +kubebuilder:printcolumn:name="Notifier",type=string,JSONPath=`.spec.containerNotifierName`
// +kubebuilder:printcolumn:name="Succeeded",type=string,JSONPath=`.status.conditions[?(@.type=="Succeeded")].status`
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

// NotificationStatus is the record of what ran: one entry per pod, written by its node.
type NotificationStatus struct {
	// PodNotificationStatuses has one entry per selected pod, keyed by pod UID.
	// +listType=map
	// +listMapKey=podUID
	// +optional
	PodNotificationStatuses []PodNotificationStatus `json:"podNotificationStatuses,omitempty"`
	// Conditions: Triggered and Succeeded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PodNotificationStatus is one pod's outcome.
type PodNotificationStatus struct {
	// +required
	PodName string `json:"podName"`
	// +required
	PodUID string `json:"podUID"`
	// +required
	NodeName string `json:"nodeName"`
	// ContainerNotificationStatuses has one entry per container declaring the notifier.
	// +listType=map
	// +listMapKey=containerName
	// +optional
	ContainerNotificationStatuses []ContainerNotificationStatus `json:"containerNotificationStatuses,omitempty"`
}

// ContainerNotificationStatus is one container's outcome.
type ContainerNotificationStatus struct {
	// +required
	ContainerName string `json:"containerName"`
	// Timestamp is when the action started.
	// +optional
	Timestamp *metav1.Time `json:"timestamp,omitempty"`
	// Succeed: the action ran and, with a probe, the probe succeeded in time.
	Succeed bool `json:"succeed"`
	// Error says why not, once it is known.
	// +optional
	Error *NotificationError `json:"error,omitempty"`
}

// NotificationError is why a container's notifier did not succeed.
type NotificationError struct {
	// +kubebuilder:validation:Enum=Timeout;Error
	// +required
	ErrorType string `json:"errorType"`
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// +optional
	Timestamp *metav1.Time `json:"timestamp,omitempty"`
}

// NotificationList is a list of Notifications.
//
// +kubebuilder:object:root=true
type NotificationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Notification `json:"items"`
}
