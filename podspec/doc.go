// Package podspec reads from the API server what the kubelet does not say in
// CRI: whether a container it creates is one of its pod's ephemeral
// containers (spec.ephemeralContainers), so that crishim can treat every
// ephemeral container as a debug container.
package podspec
