// Package harness starts a private, throw-away container runtime (with runc and CNI) for
// crishim's end-to-end tests, demo, node and bench. $RUNTIME (or Options.Runtime) picks it:
// containerd v2.4.2 built from the Go module proxy (the default), Debian's containerd 1.6, or
// CRI-O; backendFor in runtime.go is where they part.
//
// Every instance lives in a numbered "slot": a directory under BaseDir, a CNI bridge and a
// subnet of its own, owned through an flock on a lock file next to the directory. Owning the
// lock means nobody else uses the slot, so whatever is found in it when the lock is taken is
// the leftover of an interrupted run and is swept before use. This makes concurrent test
// processes safe and makes a test killed halfway harmless for the next one.
//
// Nothing here talks to, or writes state for, the system containerd: the socket, root, state,
// runc root, CNI config and IPAM data all live under the slot directory. The only shared
// places containerd 1.6 insists on are /run/containerd/s (shim sockets, named by a hash of our
// own socket path) and /var/lib/cni/results (the CNI result cache, files named after our
// slot's CNI network or our sandboxes' ids); both are cleaned per slot on teardown.
// containerd 2.x keeps its shim sockets in the slot too, and its NRI socket (host-global by
// default) is disabled.
//
// The images (a pause image and a busybox image) are built offline from the host's static
// busybox and imported with ctr, because no registry is reachable from a test machine.
package harness
