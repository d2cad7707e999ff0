package main

import (
	"context"
	"log/slog"

	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/proxy"
	"github.com/crishim/crishim/shim"
)

// crishimMetrics is the registry /metrics serves, with the calls' series,
// and each feature's set of collectors on it.
type crishimMetrics struct {
	*metrics.Metrics
	target        *metrics.PIDTarget
	signals       *metrics.Signals
	streaming     *metrics.Streaming
	idempotent    *metrics.Idempotent
	notifications *metrics.Notifications
	debugImages   *metrics.DebugImages
	audit         *metrics.Audit
	config        *metrics.Config
}

func newMetrics() crishimMetrics {
	// Every method crishim serves gets its own label value; any other
	// method a client names shares one.
	known := proxy.MethodNames(append(proxy.CRIServices, shim.ServiceDescs()...)...)
	m := metrics.New(version, commit, known)
	m.InitProtocolErrors(proxy.ProtocolErrorReasons)
	reg := m.Registry
	return crishimMetrics{
		Metrics:       m,
		target:        metrics.NewPIDTarget(reg),
		signals:       metrics.NewSignals(reg),
		streaming:     metrics.NewStreaming(reg),
		idempotent:    metrics.NewIdempotent(reg),
		notifications: metrics.NewNotifications(reg),
		debugImages:   metrics.NewDebugImages(reg),
		audit:         metrics.NewAudit(reg),
		config:        metrics.NewConfig(reg),
	}
}

// listenMetrics binds the metrics server (/metrics, /healthz, /readyz with
// ready's verdict); nil when --metrics-address is empty.
func listenMetrics(addr string, m *metrics.Metrics, ready func(context.Context) error, log *slog.Logger) (*metrics.HTTPServer, error) {
	if addr == "" {
		return nil, nil
	}
	return metrics.Listen(addr, m, ready, log)
}

func metricsAddr(s *metrics.HTTPServer) string {
	if s == nil {
		return "disabled"
	}
	return s.Addr()
}
