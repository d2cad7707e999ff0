// Package tracing exports OpenTelemetry spans of what crishim does itself:
// the calls it intercepts, the calls those make to the runtime, and the
// streaming sessions. It is modelled on the kubelet's TracingConfiguration:
// an OTLP gRPC exporter, a parent-based sampler that honours the kubelet's
// decision, and nothing at all when no endpoint is given.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// ServiceName names crishim's spans' resource.
const ServiceName = "crishim"

// MaxSamplingRatePerMillion samples every trace.
const MaxSamplingRatePerMillion = 1_000_000

// Config is the kubelet's TracingConfiguration, as flags.
type Config struct {
	// Endpoint is HOST:PORT of an OTLP gRPC collector (--tracing-endpoint);
	// empty turns tracing off.
	Endpoint string
	// SamplingRatePerMillion samples traces that start at crishim
	// (--tracing-sampling-rate-per-million); a caller's sampled decision
	// is always followed.
	SamplingRatePerMillion int
}

// Validate checks the configuration without dialling the collector.
func (c Config) Validate() error {
	if c.SamplingRatePerMillion < 0 || c.SamplingRatePerMillion > MaxSamplingRatePerMillion {
		return fmt.Errorf("--tracing-sampling-rate-per-million %d: want 0 to %d", c.SamplingRatePerMillion, MaxSamplingRatePerMillion)
	}
	if c.Endpoint == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(c.Endpoint)
	if err != nil {
		return fmt.Errorf("--tracing-endpoint %q: want HOST:PORT: %w", c.Endpoint, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || host == "" {
		return fmt.Errorf("--tracing-endpoint %q: want HOST:PORT with a port from 1 to 65535", c.Endpoint)
	}
	return nil
}

// Tracing is the tracer provider and the handlers built on it. A nil
// *Tracing is tracing off: every method answers nil, so callers install
// nothing and pay nothing.
type Tracing struct {
	tp         *sdktrace.TracerProvider
	propagator propagation.TextMapPropagator
}

// Propagator is the kubelet's: W3C trace context and baggage.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// Start builds the exporter and the tracer provider; nil when cfg.Endpoint
// is empty. The collector is dialled lazily and spans leave through a
// bounded batch queue that drops when full: a collector that is down or slow
// never blocks or slows a call.
func Start(ctx context.Context, cfg Config, version string, log *slog.Logger) (*Tracing, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(cfg.Endpoint), otlptracegrpc.WithInsecure())
	if err != nil {
		return nil, fmt.Errorf("tracing exporter for %s: %w", cfg.Endpoint, err)
	}
	res, err := resource.New(ctx,
		resource.WithHost(),
		resource.WithAttributes(semconv.ServiceName(ServiceName), semconv.ServiceVersion(version)),
	)
	if err != nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	// As the kubelet: a trace the caller did not sample starts here only
	// at the configured rate.
	root := sdktrace.NeverSample()
	if cfg.SamplingRatePerMillion > 0 {
		root = sdktrace.TraceIDRatioBased(float64(cfg.SamplingRatePerMillion) / MaxSamplingRatePerMillion)
	}
	// Export failures come through otel's global error handler; they are
	// the only sign of a collector that is away.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: exporting spans failed", "endpoint", cfg.Endpoint, "err", err)
	}))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.ParentBased(root)),
		// Never WithBlocking: a full queue drops spans rather than wait.
		sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(sdktrace.DefaultMaxQueueSize)),
		sdktrace.WithResource(res),
	)
	return &Tracing{tp: tp, propagator: Propagator()}, nil
}

// TracerProvider is nil when tracing is off.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tp
}

// Shutdown exports the spans still queued, until ctx ends.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing shutdown: %w", err)
	}
	return nil
}
