// Package node runs a one-node Kubernetes cluster whose kubelet talks to crishim, which sits
// in front of the test bed's private containerd (test/harness): etcd and kube-apiserver on
// loopback, kube-controller-manager and kube-scheduler, and a kubelet whose node IP lives on
// a dummy interface the bed creates (the kubelet refuses a loopback node IP). The binaries are
// built offline from the Go module proxy (./kubebuild) and cached by version.
//
// Every process of a node is started in its own session and named by the node's directory in
// its flags, so `make node` can leave a node running for later commands and anything left by
// an interrupted run is found and swept by the next start.
package node
