// Package kube holds the end-to-end tests that run a real kubelet, kube-apiserver and
// kubectl (test/node) against crishim in front of the private containerd: what users do
// with kubectl, proven through crishim. They need root and skip otherwise.
package kube
