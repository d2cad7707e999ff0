package node

import (
	"context"
	"fmt"
	"os"
	"strconv"
)

// StartControlPlane starts only etcd and kube-apiserver in node index's directory (no
// runtime, no kubelet, no controllers), with the bed's PKI, and applies the manifests in
// dirs: what test/scale measures, with nothing else on the apiserver. Stop it with Stop.
func StartControlPlane(ctx context.Context, opts Options, dirs ...string) (*Node, error) {
	log := logger(opts)
	bins, err := EnsureBinaries(ctx, log)
	if err != nil {
		return nil, err
	}
	if err := Clean(opts.Index); err != nil {
		return nil, fmt.Errorf("sweep node %d: %w", opts.Index, err)
	}
	l := layout{Dir(opts.Index)}
	if err := os.MkdirAll(l.path("logs"), 0o755); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	n := &Node{l: l, opts: opts, log: log, bins: bins}
	n.s = state{
		Index:         opts.Index,
		Name:          "crishim-controlplane-" + strconv.Itoa(opts.Index),
		NodeIP:        "127.0.0.1",
		EtcdAddr:      "127.0.0.1:" + strconv.Itoa(ports[0]),
		EtcdPeerAddr:  "127.0.0.1:" + strconv.Itoa(ports[1]),
		APIServerPort: ports[2],
		Kubeconfig:    l.path("admin.kubeconfig"),
		Version:       bins.Version,
		Bins:          bins.Dir,
	}
	if err := writeState(l, n.s); err != nil {
		return nil, err
	}
	if err := n.writePKI(); err != nil {
		return nil, err
	}
	if _, err := startDaemon(l, bins.Path("etcd"), etcdArgs(l, n.s)); err != nil {
		return nil, err
	}
	if err := waitTCP(ctx, n.s.EtcdAddr); err != nil {
		return nil, fmt.Errorf("etcd: %w\n%s", err, logTail(l, "etcd"))
	}
	apiserver, err := startDaemon(l, bins.Path("kube-apiserver"), apiserverArgs(l, n.s, n.pki))
	if err != nil {
		return nil, err
	}
	if err := n.fill(); err != nil {
		return nil, err
	}
	if err := n.waitAPIServer(ctx, apiserver); err != nil {
		return nil, err
	}
	for _, d := range dirs {
		if _, err := n.Kubectl(ctx, nil, "apply", "-f", d); err != nil {
			return nil, fmt.Errorf("install %s: %w", d, err)
		}
	}
	return n, nil
}

// PIDs are the live processes of the node's component name ("etcd", "kube-apiserver").
func (n *Node) PIDs(name string) []int { return daemonsOf(n.l, name) }

// ManifestsDir is the repository's packaging/kubernetes.
func ManifestsDir() (string, error) { return manifestsDir() }
