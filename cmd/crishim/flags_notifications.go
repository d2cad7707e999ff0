package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// notificationsConfig holds the Notification API flags.
type notificationsConfig struct {
	kubeconfig string
	nodeName   string
	gcAfter    time.Duration
}

func (n *notificationsConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&n.kubeconfig, "kubeconfig", "", "kubeconfig for the apiserver: serve Notifications (crishim.io/v1alpha1) for this node; empty: in-cluster config if crishim runs in a pod, else no Notifications")
	fs.StringVar(&n.nodeName, "node-name", "", "this node's name in Notification status entries [hostname]; must match the kubelet's")
	fs.DurationVar(&n.gcAfter, "notification-gc-after", 0, "testing only: delete completed Notifications this long after creation instead of after spec.expirationSeconds (whose minimum is 600 s)")
	checkValue(fs, "notification-gc-after", nonNegative)
	// Tests only: out of --help and the default config file.
	_ = fs.MarkHidden("notification-gc-after")
}

func (n *notificationsConfig) finish() error {
	if n.nodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--node-name: empty, and the hostname is unknown: %w", err)
		}
		n.nodeName = strings.ToLower(h)
	}
	return nil
}

// enabled: a kubeconfig was given, or crishim runs in a pod.
func (n *notificationsConfig) enabled() bool {
	return n.kubeconfig != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}
