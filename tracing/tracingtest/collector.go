// Package tracingtest is an OTLP gRPC trace collector for tests: it keeps
// every span it receives, with its resource, so a test can look for
// crishim's spans by trace ID.
package tracingtest

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is one received span, with the service that sent it.
type Span struct {
	Service      string
	Name         string
	Kind         string // server, client, internal ...
	TraceID      string // hex
	SpanID       string // hex
	ParentSpanID string // hex; empty for a root
	Attributes   map[string]string
	Resource     map[string]string
	Error        bool
}

// Collector is a loopback OTLP gRPC endpoint.
type Collector struct {
	collectortrace.UnimplementedTraceServiceServer
	Endpoint string // host:port

	mu    sync.Mutex
	spans []Span
}

// Start serves a collector on a free loopback port until the test ends.
func Start(t testing.TB) *Collector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &Collector{Endpoint: ln.Addr().String()}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, c)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return c
}

// Export keeps the spans of req.
func (c *Collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, Span{
					Service:      res["service.name"],
					Name:         s.GetName(),
					Kind:         strings.ToLower(strings.TrimPrefix(s.GetKind().String(), "SPAN_KIND_")),
					TraceID:      hex.EncodeToString(s.GetTraceId()),
					SpanID:       hex.EncodeToString(s.GetSpanId()),
					ParentSpanID: hex.EncodeToString(s.GetParentSpanId()),
					Attributes:   attrs(s.GetAttributes()),
					Resource:     res,
					Error:        s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
				})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// Trace is the spans received so far of one trace.
func (c *Collector) Trace(traceID string) []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Span
	for _, s := range c.spans {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// attrs flattens attributes to strings, enough for assertions.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.GetStringValue()
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(v.GetIntValue(), 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = strconv.FormatBool(v.GetBoolValue())
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}
