// Package v1alpha1 is the Notification API (group crishim.io, version v1alpha1): the
// cluster-wide request of the Kubernetes ContainerNotifier proposal to run a named notifier
// in every pod a selector picks, whose status is the record of what ran on which node.
//
// +kubebuilder:object:generate=true
// +groupName=crishim.io
package v1alpha1
