// Package v1alpha2 is the Notification API (group crishim.io, version v1alpha2): the
// cluster-wide request of the Kubernetes ContainerNotifier proposal to run a named notifier
// in every pod a selector picks. The user's Notification carries counts, conditions and the
// first failures; the work of one node is a NodeNotification of its own, which only that
// node writes, listed in the node's NotificationInbox, the one object the node watches (docs/notifications.md has the design and its arithmetic).
//
// +kubebuilder:object:generate=true
// +groupName=crishim.io
package v1alpha2
