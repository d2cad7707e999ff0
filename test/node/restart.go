package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/crishim/crishim/test/harness"
)

// These change a running node under its kubelet, for the tests that prove what survives.

// RestartCrishim stops crishim (SIGKILL when kill is set, as after a crash; SIGTERM
// otherwise) and starts it again on the same socket and metrics address with args as its
// extra flags.
func (n *Node) RestartCrishim(ctx context.Context, kill bool, args ...string) error {
	if kill {
		if left := harness.Kill(daemonsOf(n.l, "crishim")); len(left) > 0 {
			return fmt.Errorf("crishim %v survived SIGKILL", left)
		}
	} else if err := stopDaemons(n.l, "crishim", 10*time.Second); err != nil {
		return err
	}
	n.s.CrishimArgs = args
	if err := n.startCrishim(); err != nil {
		return err
	}
	return writeState(n.l, n.s)
}

// RestartContainerd kills the private containerd (its shims and containers survive) and
// starts it again. Only a node started by this process can.
func (n *Node) RestartContainerd(ctx context.Context) error {
	if n.cd == nil {
		return errors.New("containerd of a reused node cannot be restarted from here")
	}
	return n.cd.Restart(ctx)
}

// ContainerdEndpoint is the private containerd's own CRI endpoint.
func (n *Node) ContainerdEndpoint() string { return n.s.ContainerdEndpoint }

// PointKubelet points the kubelet at endpoint the way docs/install.md does, restarts it and
// waits until the node is Ready again: crishim's endpoint installs crishim's kubelet files,
// containerd's removes them (kubeadm's config.yaml names containerd).
func (n *Node) PointKubelet(ctx context.Context, endpoint string) error {
	var err error
	switch endpoint {
	case n.CrishimEndpoint():
		err = n.installCrishimKubeletFiles()
	case n.ContainerdEndpoint():
		err = n.removeCrishimKubeletFiles()
	default:
		err = fmt.Errorf("the kubelet goes to crishim (%s) or containerd (%s), not %s", n.CrishimEndpoint(), n.ContainerdEndpoint(), endpoint)
	}
	if err != nil {
		return err
	}
	if err := n.RestartKubelet(ctx); err != nil {
		return fmt.Errorf("kubelet on %s: %w", endpoint, err)
	}
	return nil
}

// RestartKubelet is `systemctl restart kubelet`: it stops the kubelet, starts it as its unit
// files say now, and waits until the node is Ready again.
func (n *Node) RestartKubelet(ctx context.Context) error {
	if err := stopDaemons(n.l, "kubelet", 10*time.Second); err != nil {
		return err
	}
	kubelet, err := n.startKubelet(ctx)
	if err != nil {
		return err
	}
	// The Node object stays Ready for a while after its kubelet stopped, so wait for the new
	// kubelet's own health first.
	if err := n.waitKubeletHealthy(ctx, kubelet); err != nil {
		return err
	}
	return n.WaitReady(ctx, 2*time.Minute)
}

// KubeletHostPath is where the bed keeps the file a kubeadm node has at path (such as
// /var/lib/kubelet/kubeadm-flags.env), for tests that change the node as an operator would.
func (n *Node) KubeletHostPath(path string) string { return n.l.hostPath(n.bins)(path) }

func (n *Node) waitKubeletHealthy(ctx context.Context, exited <-chan struct{}) error {
	url := "http://127.0.0.1:" + strconv.Itoa(n.s.KubeletHealthzPort) + "/healthz"
	return n.waitHTTPOK(ctx, http.DefaultClient, url, exited, "kubelet")
}

// CrishimEndpoint is crishim's socket as a CRI endpoint.
func (n *Node) CrishimEndpoint() string { return "unix://" + n.s.CrishimSock }

// StopAPIServer stops kube-apiserver (the node's kubelet and crishim keep running), and
// StartAPIServer starts it again on the same port and data; for the tests of what survives
// an unreachable apiserver.
func (n *Node) StopAPIServer() error { return stopDaemons(n.l, "kube-apiserver", 10*time.Second) }

// StartAPIServer starts kube-apiserver again and waits until it is ready.
func (n *Node) StartAPIServer(ctx context.Context) error {
	exited, err := startDaemon(n.l, n.bins.Path("kube-apiserver"), apiserverArgs(n.l, n.s, n.pki))
	if err != nil {
		return err
	}
	return n.waitAPIServer(ctx, exited)
}

// CrishimPID is the process ID of the node's crishim, for benchmarks that read its CPU time
// and memory.
func (n *Node) CrishimPID() (int, error) {
	pids := daemonsOf(n.l, "crishim")
	if len(pids) != 1 {
		return 0, fmt.Errorf("node %s runs %d crishim processes (%v), want 1", n.Name, len(pids), pids)
	}
	return pids[0], nil
}
