package proxy

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// runtimeFault says whether a status code points at the runtime or crishim
// rather than at the caller: those are worth a warning. NotFound for a
// removed container, Canceled by the kubelet, or Unimplemented for an
// optional method are daily life.
func runtimeFault(code codes.Code) bool {
	switch code {
	case codes.Unknown, codes.Internal, codes.Unavailable, codes.DataLoss,
		codes.DeadlineExceeded, codes.ResourceExhausted:
		return true
	}
	return false
}

// probeMethods are intercepted calls the kubelet makes every few seconds
// for each exec probe (ExecSync, intercepted when --audit-exec-sync audits
// it): logged like pass-through calls, or they would flood an info log.
var probeMethods = map[string]bool{
	"/runtime.v1.RuntimeService/ExecSync": true,
}

// callLevel is the log level of one finished call: warnings for faults,
// then info for intercepted calls (what crishim itself did) and debug for
// pass-through (the kubelet's relist alone would flood an info log).
func callLevel(code codes.Code, intercepted bool) slog.Level {
	switch {
	case runtimeFault(code):
		return slog.LevelWarn
	case intercepted:
		return slog.LevelInfo
	default:
		return slog.LevelDebug
	}
}

// LogUnary logs intercepted calls with the container and pod they concern.
func LogUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		level := callLevel(status.Code(err), !probeMethods[info.FullMethod])
		if log.Enabled(ctx, level) {
			attrs := []slog.Attr{slog.String("method", info.FullMethod), slog.Duration("duration", time.Since(start))}
			if r, ok := req.(interface{ GetContainerId() string }); ok && r.GetContainerId() != "" {
				attrs = append(attrs, slog.String("container", r.GetContainerId()))
			}
			if r, ok := req.(interface{ GetPodSandboxId() string }); ok && r.GetPodSandboxId() != "" {
				attrs = append(attrs, slog.String("pod", r.GetPodSandboxId()))
			}
			attrs = append(attrs, statusAttrs(err)...)
			log.LogAttrs(ctx, level, "call", attrs...)
		}
		return resp, err
	}
}

// LogStream logs relayed and streaming calls. Relayed requests are never
// decoded, so their lines name the method, not the container.
func LogStream(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		st := status.Convert(err)
		logRelayed(ss.Context(), log, info.FullMethod, start, st.Code(), st.Message())
		return err
	}
}

// logRelayed logs a finished relayed call: the relay's directly (its calls
// reach no interceptor), the audited calls crishim's gRPC server relays
// through LogStream.
func logRelayed(ctx context.Context, log *slog.Logger, method string, start time.Time, code codes.Code, msg string) {
	if log == nil {
		return
	}
	level := callLevel(code, false)
	if !log.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("method", method), slog.Duration("duration", time.Since(start)), slog.String("code", code.String())}
	if code != codes.OK {
		attrs = append(attrs, slog.String("err", msg))
	}
	log.LogAttrs(ctx, level, "relayed call", attrs...)
}

func statusAttrs(err error) []slog.Attr {
	if err == nil {
		return []slog.Attr{slog.String("code", codes.OK.String())}
	}
	st := status.Convert(err)
	return []slog.Attr{slog.String("code", st.Code().String()), slog.String("err", st.Message())}
}
