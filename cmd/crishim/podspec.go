package main

import (
	"fmt"
	"log/slog"

	"k8s.io/client-go/dynamic"

	"github.com/crishim/crishim/podspec"
	"github.com/crishim/crishim/shim"
)

// podSpecs reads the node's pods from the API server, with the credentials
// the Notification API uses (--kubeconfig, or in-cluster), so that the
// debug image allowlist and the audit log know the kubelet's ephemeral
// containers. Nil without them: then only TARGET containers are debug
// containers.
func podSpecs(cfg notificationsConfig, log *slog.Logger) (shim.ContainerKinds, error) {
	if !cfg.enabled() {
		log.Debug("no API server: only containers created with PID namespace TARGET are debug containers", "feature", "debug-images")
		return nil, nil
	}
	rc, err := cfg.restConfig()
	if err != nil {
		return nil, err
	}
	// client-go's default (5 a second, bursts of 10) would queue the pod
	// reads of a node starting many containers at once, each holding a
	// CreateContainer (measured: 200 ms a read past the burst). The
	// kubelet's own defaults (kubeAPIQPS, kubeAPIBurst) are these; the API
	// server's priority and fairness still bound what the node may ask.
	rc.QPS, rc.Burst = 50, 100
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("apiserver client: %w", err)
	}
	return podspec.New(dyn), nil
}
