// Package nodeinstall is the per-node work of the fleet installer
// (cmd/crishim-node-installer, packaging/kubernetes/install): it puts crishim on the node it
// runs on and points the kubelet at it, or takes it off again, through the host's systemd
// over D-Bus and hostPath mounts of the few host directories it writes. No nsenter, no
// privileged container.
//
// Its rules: it owns only the files it wrote (a crishim installed by the .deb or by hand is
// used as it is, never overwritten or removed); every file it changes is journaled with its
// previous content, so a failed check puts back exactly what was there; the node is tainted
// while the kubelet is switched and labelled only after it is Ready again with crishim
// answering CRI Status.
package nodeinstall
