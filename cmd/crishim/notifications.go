package main

import (
	"context"
	"fmt"
	"log/slog"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/notification/node"
	"github.com/crishim/crishim/proxy"
	"github.com/crishim/crishim/shim"
)

// restConfig is the API server client's configuration: --kubeconfig, or
// in-cluster when crishim runs in a pod. Both the node's Notification work
// and the pod spec reads use it.
func (cfg notificationsConfig) restConfig() (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if cfg.kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %q: %w", cfg.kubeconfig, err)
	}
	rc.UserAgent = "crishim/" + version
	return rc, nil
}

// startNotifications runs this node's side of the Notification API (notification/node: the
// NodeNotifications listed in the NotificationInbox named --node-name), when configured, until ctx ends or
// stop is called; done is closed once it has ended (nil: not configured). An unreachable
// apiserver is not an error here: the controller warns and retries, and CRI keeps working;
// only a kubeconfig that cannot be read stops crishim at start. The aggregator that fans
// Notifications out and sums them up is not crishim: crishim-notification-controller.
func startNotifications(ctx context.Context, cfg notificationsConfig, backend *proxy.Backend, sh *shim.Shim, m *metrics.Notifications, log *slog.Logger) (stop context.CancelFunc, done <-chan struct{}, err error) {
	if !cfg.enabled() {
		return func() {}, nil, nil
	}
	rc, err := cfg.restConfig()
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("apiserver client: %w", err)
	}
	c := node.New(node.Options{
		Dynamic:  dyn,
		NodeName: cfg.nodeName,
		Pods:     runtimeapi.NewRuntimeServiceClient(backend.RuntimeConn()),
		Runner:   sh.API(),
		Metrics:  m,
		Log:      log,
	})
	ctx, stop = context.WithCancel(ctx)
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		c.Run(ctx)
	}()
	log.Info("serving this node's NodeNotifications", "node", cfg.nodeName, "apiserver", rc.Host)
	return stop, ch, nil
}
