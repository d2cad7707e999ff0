//go:build tools

// Package kubebuild pins the Kubernetes release whose binaries the node test bed builds
// (test/node): the components of a one-node cluster and etcd (./etcd). It is a module of its
// own so that crishim's module never depends on k8s.io/kubernetes.
package kubebuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
