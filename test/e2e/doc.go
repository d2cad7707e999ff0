// Package e2e holds crishim's end-to-end tests: the crishim binary in front of
// a private real containerd (package harness), driven by the kubelet's own
// CRI client. They need root; as another user they skip with a message.
package e2e
