package streaming

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// tracerName is the instrumentation scope of the session spans.
const tracerName = "github.com/crishim/crishim/streaming"

// startSpan begins a session's span at token redemption, as a child of the
// Exec, Attach or PortForward call that issued the token: the trace then
// runs from the kubelet's call to the end of the stream. Without a tracer
// it returns r as it is and the no-op span, at no cost.
func (s *Server) startSpan(r *http.Request, kind Kind, p pending) (*http.Request, trace.Span) {
	if s.tracer == nil {
		return r, trace.SpanFromContext(r.Context())
	}
	attrs := []attribute.KeyValue{
		attribute.String("crishim.stream.kind", string(kind)),
		attribute.String("crishim.stream.protocol", upgradeProtocol(r)),
	}
	// Which container, never what runs in it: the command may hold secrets.
	switch req := p.req.(type) {
	case *runtimeapi.ExecRequest:
		attrs = append(attrs, attribute.String("container.id", req.GetContainerId()), attribute.Bool("crishim.stream.tty", req.GetTty()))
	case *runtimeapi.AttachRequest:
		attrs = append(attrs, attribute.String("container.id", req.GetContainerId()), attribute.Bool("crishim.stream.tty", req.GetTty()))
	case *runtimeapi.PortForwardRequest:
		attrs = append(attrs, attribute.String("crishim.pod_sandbox_id", req.GetPodSandboxId()))
	}
	ctx, span := s.tracer.Start(trace.ContextWithSpanContext(r.Context(), p.parent), "crishim.stream/"+string(kind),
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return r.WithContext(ctx), span
}

// upgradeProtocol names the client's upgrade from a short, fixed list (an
// attribute's values stay bounded whatever a client sends).
func upgradeProtocol(r *http.Request) string {
	switch u := strings.ToLower(r.Header.Get("Upgrade")); {
	case u == "websocket":
		return "websocket"
	case strings.HasPrefix(u, "spdy/"):
		return "spdy"
	case u == "":
		return "none"
	}
	return "other"
}

// endSpan records how the session went: its error or exit code and the
// bytes moved.
func endSpan(span trace.Span, sess *session, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if sess != nil {
		span.SetAttributes(
			attribute.Int64("crishim.stream.bytes_to_runtime", sess.toRuntime.Load()),
			attribute.Int64("crishim.stream.bytes_to_client", sess.toClient.Load()))
		if code, ok := sess.exitCode(); ok {
			span.SetAttributes(attribute.Int("crishim.stream.exit_code", int(code)))
		}
		if err == nil {
			err = sess.err
		}
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
