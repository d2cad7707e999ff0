package main

import (
	"context"
	"log/slog"

	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/proxy"
	"github.com/crishim/crishim/shim"
	"github.com/crishim/crishim/tracing"
)

// runtimeConns are crishim's connections to the runtime: its CRI services,
// and containerd's own API (nil unless --containerd-address), which TARGET
// PID namespaces and stop signals use.
type runtimeConns struct {
	backend    *proxy.Backend
	containerd *shim.Containerd
}

// dialRuntime creates the connections to the runtime's CRI services and to
// containerd. Both connect lazily: a runtime that is not up yet is not an
// error here; watchRuntime reports it.
func dialRuntime(cfg *config, tr *tracing.Tracing) (runtimeConns, error) {
	backend, err := proxy.Dial(proxy.BackendOptions{
		RuntimeEndpoint: cfg.runtimeEndpoint,
		ImageEndpoint:   cfg.imageEndpoint,
		MaxMessageSize:  cfg.maxMessageSize,
		StatsHandler:    tr.ClientHandler(),
	})
	if err != nil {
		return runtimeConns{}, err
	}
	ctrd, err := shim.DialContainerd(cfg.target.containerdAddress, cfg.target.containerdNamespace)
	if err != nil {
		_ = backend.Close()
		return runtimeConns{}, err
	}
	return runtimeConns{backend: backend, containerd: ctrd}, nil
}

func (c runtimeConns) close() {
	_ = c.containerd.Close()
	_ = c.backend.Close()
}

// watchRuntime follows the runtime connection until ctx ends: its state
// goes to crishim_runtime_up and to the log.
func watchRuntime(ctx context.Context, backend *proxy.Backend, m *metrics.Metrics, log *slog.Logger) {
	// Down until the first connection: an absent series would hide a
	// runtime that never came up from alerts on crishim_runtime_up == 0.
	m.RuntimeConnection("runtime", false)
	go backend.Watch(ctx, func(backend string, up bool) {
		m.RuntimeConnection(backend, up)
		if up {
			log.Info("runtime connection ready", "backend", backend)
		} else {
			log.Warn("runtime unreachable; calls answer Unavailable until it returns", "backend", backend)
		}
	})
}
