// Package sysnode holds the tests that run on the systemd node (test/node/systemd.go): a
// Debian 12 whose PID 1 is systemd, with containerd, crishim from its .deb and the kubelet as
// its units. They are skipped unless CRISHIM_SYSTEMD_NODE names the node's index; see
// docs/testing.md#the-systemd-node.
package sysnode
