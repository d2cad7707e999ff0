package proxy

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
)

// CallObserver hears about every call the h2 relay passes through. Those
// calls never reach a gRPC handler, so the Stream interceptors do not see
// them; this is how they are counted anyway (metrics.Metrics is one).
type CallObserver interface {
	// CallStarted is called as a call starts; the returned function is
	// called once, when it ends, with its gRPC status code.
	CallStarted(method string) (done func(code codes.Code))
}

// logRelayed logs a finished relayed call like LogStream does.
func logRelayed(log *slog.Logger, method string, start time.Time, code codes.Code, msg string) {
	if log == nil {
		return
	}
	level := slog.LevelDebug
	if runtimeFault(code) {
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("method", method), slog.Duration("duration", time.Since(start)), slog.String("code", code.String())}
	if code != codes.OK {
		attrs = append(attrs, slog.String("err", decodeGrpcMessage(msg)))
	}
	log.LogAttrs(ctx, level, "relayed call", attrs...)
}
