// Command crishim-node-installer is the per-node work of the fleet installer
// (packaging/kubernetes/install, docs/install.md#the-fleet-installer): run by a DaemonSet on
// every selected node, it installs crishim from its image into host paths and points the
// kubelet at it (install), or points the kubelet back at its runtime and removes crishim
// (uninstall), talking to the host's systemd over D-Bus. One node at a time: the pods take a
// coordination.k8s.io Lease in turn. Done, it reports Ready (the `ready` command is the
// readiness probe) and waits to be stopped; failed and rolled back, it stays unready, which
// stops a DaemonSet rolling update there.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/crishim/crishim/nodeinstall"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

type options struct {
	root, payload, node   string
	kubeconfig            string
	leaseNamespace, lease string
	readyFile             string
	timeout               time.Duration
	crishimEndpoint       string
	exitWhenDone, logJSON bool
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	root := &cobra.Command{
		Use:           "crishim-node-installer",
		Short:         "Install crishim on this node and point the kubelet at it, or take it off again",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&o.root, "host-root", "/host", "where the host's directories are mounted (etc/systemd/system, usr/local/bin, run/systemd...)")
	pf.StringVar(&o.payload, "payload", "/payload", "the image's directory of crishim's binaries, units and kubelet drop-ins")
	pf.StringVar(&o.node, "node", os.Getenv("NODE_NAME"), "this node's name (the downward API's spec.nodeName)")
	pf.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster (the pod's ServiceAccount)")
	pf.StringVar(&o.leaseNamespace, "lease-namespace", envOr("POD_NAMESPACE", "crishim-installer"), "namespace of the Lease the installers take in turn")
	pf.StringVar(&o.lease, "lease-name", "crishim-node-installer", "name of that Lease")
	pf.StringVar(&o.readyFile, "ready-file", "/run/crishim-node-installer/ready", "written when the work is done: the readiness probe (`ready`) looks for it")
	pf.DurationVar(&o.timeout, "check-timeout", 2*time.Minute, "how long to wait for crishim to answer and for the node to be Ready again before rolling back")
	pf.StringVar(&o.crishimEndpoint, "crishim-endpoint", "", "crishim's CRI socket as seen in the pod (default: <host-root>/run/crishim/crishim.sock)")
	pf.BoolVar(&o.exitWhenDone, "exit", false, "exit when done (0, or 1 after a rollback) instead of waiting to be stopped")
	pf.BoolVar(&o.logJSON, "log-json", false, "log JSON instead of text")
	root.AddCommand(
		&cobra.Command{
			Use:   "install",
			Short: "Install crishim (unless a package did) and point the kubelet at it; roll back on a failed check",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return run(cmd.Context(), o, stderr, (*nodeinstall.Installer).Install)
			},
		},
		&cobra.Command{
			Use:   "uninstall",
			Short: "Point the kubelet back at its runtime and remove the installer's crishim",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return run(cmd.Context(), o, stderr, (*nodeinstall.Installer).Uninstall)
			},
		},
		&cobra.Command{
			Use:   "ready",
			Short: "Exit 0 if the work is done (the readiness probe)",
			Args:  cobra.NoArgs,
			RunE: func(*cobra.Command, []string) error {
				_, err := os.Stat(o.readyFile)
				return err
			},
		},
	)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "crishim-node-installer: %v\n", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, o options, stderr io.Writer, work func(*nodeinstall.Installer, context.Context) error) error {
	var h slog.Handler = slog.NewTextHandler(stderr, nil)
	if o.logJSON {
		h = slog.NewJSONHandler(stderr, nil)
	}
	log := slog.New(h).With("node", o.node)
	if o.node == "" {
		return errors.New("--node (or $NODE_NAME) is required")
	}
	if err := os.Remove(o.readyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	sd, err := nodeinstall.DialSystemd(ctx, filepath.Join(o.root, nodeinstall.SystemdPrivateSocket))
	if err != nil {
		return err
	}
	defer sd.Close()
	endpoint := o.crishimEndpoint
	if endpoint == "" {
		endpoint = "unix://" + filepath.Join(o.root, "/run/crishim/crishim.sock")
	}
	in := &nodeinstall.Installer{
		Root: o.root, Payload: o.payload, Systemd: sd,
		Cluster:      nodeinstall.KubeNode{Client: client, Name: o.node},
		CheckCRI:     func(ctx context.Context) error { return nodeinstall.CRIStatus(ctx, endpoint) },
		CheckTimeout: o.timeout,
		Log:          log,
	}
	lock := nodeinstall.Lock{Client: client, Namespace: o.leaseNamespace, Name: o.lease, Identity: o.node, Log: log}
	log.Info("crishim-node-installer starting", "version", version)
	err = lock.Do(ctx, func(ctx context.Context) error { return work(in, ctx) })
	if ctx.Err() != nil {
		return err
	}
	if err != nil {
		log.Error("failed; the node is as it was before. Staying unready: a rolling update stops here", "err", err)
		if o.exitWhenDone {
			return err
		}
	} else {
		if err := os.MkdirAll(filepath.Dir(o.readyFile), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(o.readyFile, []byte(version+"\n"), 0o644); err != nil {
			return err
		}
		log.Info("done; waiting to be stopped")
		if o.exitWhenDone {
			return nil
		}
	}
	<-ctx.Done()
	return nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
