// Package sysinstall proves the fleet installer (packaging/kubernetes/install,
// cmd/crishim-node-installer) on the test bed's systemd node brought up straight on
// containerd: crishim put on by `kubectl apply`, a newer image rolled out, crishim taken off
// again, with no pod restarted. Opt-in: CRISHIM_INSTALLER_NODE=<systemd node index> (root);
// `make test-sysnode` runs it after test/sysnode, on the same index.
package sysinstall
