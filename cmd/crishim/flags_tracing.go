package main

import (
	"context"
	"github.com/spf13/pflag"
	"log/slog"

	"github.com/crishim/crishim/tracing"
)

// tracingConfig holds the tracing flags, named after the kubelet's
// TracingConfiguration fields.
type tracingConfig struct{ tracing.Config }

func (c *tracingConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.Endpoint, "tracing-endpoint", "", "HOST:PORT of an OTLP gRPC collector to send spans of intercepted calls and streams to; empty disables tracing")
	fs.IntVar(&c.SamplingRatePerMillion, "tracing-sampling-rate-per-million", 0, "traces per million that start at crishim to sample; a caller's sampled trace is always followed")
}

func (c *tracingConfig) finish() error { return c.Validate() }

// stopTracing exports the spans still queued, within what is left of the
// shutdown timeout: a collector that is away cannot hold crishim up.
func stopTracing(ctx context.Context, t *tracing.Tracing, log *slog.Logger) {
	if t == nil {
		return
	}
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("tracing: spans not exported at shutdown", "err", err)
	}
}
