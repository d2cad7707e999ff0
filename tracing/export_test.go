package tracing

import sdktrace "go.opentelemetry.io/otel/sdk/trace"

// NewForTest wraps a tracer provider the test built (one exporting to
// memory).
func NewForTest(tp *sdktrace.TracerProvider) *Tracing {
	return &Tracing{tp: tp, propagator: Propagator()}
}
