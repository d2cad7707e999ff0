package main

import (
	"log/slog"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/shim"
	"github.com/crishim/crishim/streaming"
)

// newShim builds crishim's own CRI services (the intercepted calls and
// crishim.v1) from the features' settings and what they share: the
// runtime, the streaming server (nil: the runtime's own URLs pass
// through), the audit log and the metrics.
func newShim(cfg *config, rt runtimeConns, streams *streaming.Server, auditLog *audit.Log, m crishimMetrics, log *slog.Logger) (*shim.Shim, error) {
	pods, err := podSpecs(cfg.notifications, log)
	if err != nil {
		return nil, err
	}
	return shim.New(rt.backend, shim.Options{
		Version:          version,
		RuntimeEndpoint:  cfg.runtimeEndpoint,
		ImageEndpoint:    cfg.imageEndpoint,
		Log:              log,
		PIDTargetMode:    cfg.target.pidTargetMode,
		Containerd:       rt.containerd,
		PIDTargetMetrics: m.target,
		StopSignalMode:   cfg.stopSignal.mode,
		SignalMetrics:    m.signals,
		Streaming:        streams,

		DebugImages:       cfg.debugImages.policy,
		DebugImageMetrics: m.debugImages,
		Pods:              pods,
		DebugOtherCallers: cfg.debugImages.otherCallers,
		Audit:             auditLog,

		IdempotentMetrics: m.idempotent,
	}), nil
}
