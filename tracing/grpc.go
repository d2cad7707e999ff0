package tracing

import (
	"context"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/stats"
)

// ServerHandler traces the calls of the methods given (those crishim
// serves itself) and no other: a call crishim's gRPC server relays (the
// audited calls of other callers) keeps its trace context exactly as the
// caller sent it. nil when tracing is off.
func (t *Tracing) ServerHandler(methods []string) stats.Handler {
	if t == nil {
		return nil
	}
	served := make(map[string]bool, len(methods))
	for _, m := range methods {
		served[m] = true
	}
	return &only{
		Handler: otelgrpc.NewServerHandler(t.options()...),
		keep:    func(_ context.Context, method string) bool { return served[method] },
	}
}

// ClientHandler traces the calls crishim makes to the runtime within one
// of its own spans, so the runtime sees crishim's span as the parent. Calls
// without one (the audited calls crishim's gRPC server relays, whose
// context holds at most the caller's remote span) pass untouched. nil when tracing is off.
func (t *Tracing) ClientHandler() stats.Handler {
	if t == nil {
		return nil
	}
	return &only{
		Handler: otelgrpc.NewClientHandler(t.options()...),
		keep: func(ctx context.Context, _ string) bool {
			sc := trace.SpanContextFromContext(ctx)
			return sc.IsValid() && !sc.IsRemote()
		},
	}
}

func (t *Tracing) options() []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(t.tp),
		otelgrpc.WithPropagators(t.propagator),
		// Metrics are Prometheus's job here, with bounded labels.
		otelgrpc.WithMeterProvider(noop.NewMeterProvider()),
	}
}

// only hands the calls keep selects to the wrapped handler and leaves the
// others alone entirely: otelgrpc's own filter still extracts and injects
// trace context for the calls it does not record.
type only struct {
	stats.Handler
	keep func(ctx context.Context, method string) bool
}

// kept marks the contexts of calls given to the wrapped handler. Each
// handler has its own key: a client call made inside a traced server call
// inherits the server's mark.
type kept struct{ h *only }

func (o *only) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if !o.keep(ctx, info.FullMethodName) {
		return ctx
	}
	return context.WithValue(o.Handler.TagRPC(ctx, info), kept{o}, true)
}

func (o *only) HandleRPC(ctx context.Context, rs stats.RPCStats) {
	if ctx.Value(kept{o}) != nil {
		o.Handler.HandleRPC(ctx, rs)
	}
}
