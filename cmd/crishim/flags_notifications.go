package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// notificationsConfig holds the Notification API flags.
type notificationsConfig struct {
	kubeconfig string
	nodeName   string
}

func (n *notificationsConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&n.kubeconfig, "kubeconfig", "", "kubeconfig for the apiserver: serve this node's part of Notifications (crishim.io/v1alpha2); empty: in-cluster config if crishim runs in a pod, else no Notifications")
	fs.StringVar(&n.nodeName, "node-name", "", "this node's name: crishim runs the NodeNotifications its NotificationInbox of this name lists [hostname]; must match the kubelet's")
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
