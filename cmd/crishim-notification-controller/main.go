// Command crishim-notification-controller is the Notification API's aggregator
// (notification/aggregator): it fans each Notification out to per-node NodeNotifications and
// sums their results into the Notification's status. It runs as a Deployment under its own
// ServiceAccount (packaging/kubernetes/notification-controller.yaml), never with a node's
// identity; replicas elect one leader on a coordination.k8s.io Lease, and only the leader
// acts.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/crishim/crishim/notification/aggregator"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "crishim-notification-controller:", err)
		os.Exit(1)
	}
}

type config struct {
	kubeconfig     string
	leaseNamespace string
	leaseName      string
	identity       string
	answerTimeout  time.Duration
	resultTimeout  time.Duration
	writeInterval  time.Duration
	gcAfter        time.Duration
	qps            float64
	burst          int
}

func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("crishim-notification-controller", flag.ContinueOnError)
	host, _ := os.Hostname()
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster (the pod's ServiceAccount)")
	fs.StringVar(&c.leaseNamespace, "lease-namespace", envOr("POD_NAMESPACE", "kube-system"), "namespace of the leader election Lease")
	fs.StringVar(&c.leaseName, "lease-name", "crishim-notification-controller", "name of the leader election Lease")
	fs.StringVar(&c.identity, "identity", envOr("POD_NAME", host)+"_"+fmt.Sprint(os.Getpid()), "this replica's name in the Lease")
	fs.DurationVar(&c.answerTimeout, "node-answer-timeout", 5*time.Minute, "a node that has not started its share this long after it was created: its pods fail with NodeDidNotAnswer")
	fs.DurationVar(&c.resultTimeout, "node-result-timeout", 30*time.Minute, "a node that started its share this long ago without a result: its running pods fail with ResultLost")
	fs.DurationVar(&c.writeInterval, "write-interval", time.Second, "at most one status write per Notification per interval")
	fs.DurationVar(&c.gcAfter, "gc-after", 0, "testing only: delete complete Notifications this long after creation instead of after spec.expirationSeconds")
	// A fleet's first Notification costs 3 requests per node (its share, and its inbox with
	// the read of its Node that owns it), later ones 2: at 200/s, 5,000 nodes in 75 s.
	fs.Float64Var(&c.qps, "kube-api-qps", 200, "client-side request rate to the apiserver")
	fs.IntVar(&c.burst, "kube-api-burst", 400, "client-side request burst to the apiserver")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for name, d := range map[string]time.Duration{"node-answer-timeout": c.answerTimeout, "node-result-timeout": c.resultTimeout, "write-interval": c.writeInterval} {
		if d <= 0 {
			return c, fmt.Errorf("--%s must be positive", name)
		}
	}
	return c, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run() error {
	cfg, err := parse(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var rc *rest.Config
	if cfg.kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return fmt.Errorf("--kubeconfig %q: %w", cfg.kubeconfig, err)
	}
	rc.UserAgent = "crishim-notification-controller"
	rc.QPS, rc.Burst = float32(cfg.qps), cfg.burst
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.leaseNamespace, Name: cfg.leaseName},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.identity},
	}
	log.Info("electing a leader", "lease", cfg.leaseNamespace+"/"+cfg.leaseName, "identity", cfg.identity)
	// A replica that loses the Lease stops acting at once (its context ends) and exits; the
	// Deployment restarts it as a candidate. Everything the leader decided is in the
	// objects, so the next leader continues from them.
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Name:            cfg.leaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				log.Info("leading")
				aggregator.New(aggregator.Options{Kube: kube, Dynamic: dyn, Log: log,
					AnswerTimeout: cfg.answerTimeout, ResultTimeout: cfg.resultTimeout, WriteInterval: cfg.writeInterval, GCAfter: cfg.gcAfter}).Run(ctx)
			},
			OnStoppedLeading: func() { log.Info("not leading") },
			OnNewLeader:      func(id string) { log.Info("leader", "identity", id) },
		},
	})
	return nil
}
