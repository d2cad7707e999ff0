package tracing_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/proxy"
	"github.com/crishim/crishim/shim"
	"github.com/crishim/crishim/tracing"
	"github.com/crishim/crishim/tracing/tracingtest"
)

// The kubelet's trace context, as its otelgrpc client sends it: sampled,
// with vendor state that must travel too.
const (
	kubeletTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	kubeletSpanID      = "00f067aa0ba902b7"
	kubeletTraceparent = "00-" + kubeletTraceID + "-" + kubeletSpanID + "-01"
	kubeletTracestate  = "vendor=opaque-value"
)

// fakeRuntime records the metadata each method arrives with.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu sync.Mutex
	md map[string]metadata.MD
}

func (f *fakeRuntime) record(ctx context.Context, method string) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.md[method] = md
}

func (f *fakeRuntime) seen(method string) metadata.MD {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.md[method]
}

func (f *fakeRuntime) Version(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	f.record(ctx, "Version")
	return &runtimeapi.VersionResponse{RuntimeName: "fake", RuntimeApiVersion: "v1"}, nil
}

func (f *fakeRuntime) ListContainers(ctx context.Context, _ *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f.record(ctx, "ListContainers")
	return &runtimeapi.ListContainersResponse{}, nil
}

func (f *fakeRuntime) StartContainer(ctx context.Context, _ *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	f.record(ctx, "StartContainer")
	return &runtimeapi.StartContainerResponse{}, nil
}

// startRuntime serves a fake runtime on a unix socket.
func startRuntime(t *testing.T) (*fakeRuntime, string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "runtime.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRuntime{md: map[string]metadata.MD{}}
	gs := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(gs, f)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return f, sock
}

// startCrishim wires the proxy, the shim and tracing as cmd/crishim does,
// in front of the runtime at sock, and returns a client of it.
func startCrishim(t *testing.T, tr *tracing.Tracing, sock string) runtimeapi.RuntimeServiceClient {
	t.Helper()
	backend, err := proxy.Dial(proxy.BackendOptions{RuntimeEndpoint: "unix://" + sock, StatsHandler: tr.ClientHandler()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	sh := shim.New(backend, shim.Options{})
	intercepted := sh.Intercepted()
	srv, err := proxy.NewServer(backend, proxy.ServerOptions{
		Intercept:    intercepted,
		Services:     sh.Services(),
		StatsHandler: tr.ServerHandler(proxy.ServedMethods(intercepted, sh.Services())),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := proxy.Listen(filepath.Join(t.TempDir(), "crishim.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	conn, err := grpc.NewClient("unix://"+ln.Path(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

// asKubelet is a call context carrying the kubelet's trace context.
func asKubelet() context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "traceparent", kubeletTraceparent, "tracestate", kubeletTracestate)
}

// callBoth makes a relayed call (Version) and an intercepted one
// (StartContainer), both as the kubelet.
func callBoth(t *testing.T, c runtimeapi.RuntimeServiceClient) {
	t.Helper()
	if _, err := c.Version(asKubelet(), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("Version: %v", err)
	}
	if _, err := c.StartContainer(asKubelet(), &runtimeapi.StartContainerRequest{ContainerId: "c1"}); err != nil {
		t.Fatalf("StartContainer: %v", err)
	}
}

// wantHeader checks that the runtime saw exactly one value for key.
func wantHeader(t *testing.T, md metadata.MD, method, key, want string) {
	t.Helper()
	if got := md.Get(key); len(got) != 1 || got[0] != want {
		t.Errorf("%s: the runtime saw %s %q, want %q", method, key, got, want)
	}
}

// TestTraceContextPassesThroughWithTracingOff: with tracing off, the
// runtime sees the kubelet's trace context byte for byte, on relayed and
// intercepted calls alike.
func TestTraceContextPassesThroughWithTracingOff(t *testing.T) {
	rt, sock := startRuntime(t)
	callBoth(t, startCrishim(t, nil, sock))
	for _, method := range []string{"Version", "ListContainers", "StartContainer"} {
		md := rt.seen(method)
		wantHeader(t, md, method, "traceparent", kubeletTraceparent)
		wantHeader(t, md, method, "tracestate", kubeletTracestate)
	}
}

// TestTraceContextWithTracingOn: relayed calls still carry the kubelet's
// trace context untouched and make no span; intercepted calls make a server
// span under the kubelet's and a client span under that, which the
// runtime sees as its parent, in the kubelet's trace.
func TestTraceContextWithTracingOn(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	rt, sock := startRuntime(t)
	callBoth(t, startCrishim(t, tracing.NewForTest(tp), sock))

	md := rt.seen("Version")
	wantHeader(t, md, "Version", "traceparent", kubeletTraceparent)
	wantHeader(t, md, "Version", "tracestate", kubeletTracestate)

	// The server span ends once the answer is on its way, which may be
	// after the client has it: wait for the span, not for a time.
	spans := spansOnceEnded(t, exp, "runtime.v1.RuntimeService/StartContainer", trace.SpanKindServer)
	server := findSpan(t, spans, "runtime.v1.RuntimeService/StartContainer", trace.SpanKindServer)
	if got := server.Parent.SpanID().String(); got != kubeletSpanID || server.SpanContext.TraceID().String() != kubeletTraceID {
		t.Errorf("crishim's server span: trace %s parent %s, want the kubelet's %s %s", server.SpanContext.TraceID(), got, kubeletTraceID, kubeletSpanID)
	}
	for _, method := range []string{"ListContainers", "StartContainer"} {
		client := findSpan(t, spans, "runtime.v1.RuntimeService/"+method, trace.SpanKindClient)
		if client.Parent.SpanID() != server.SpanContext.SpanID() {
			t.Errorf("client span %s: parent %s, want crishim's server span %s", method, client.Parent.SpanID(), server.SpanContext.SpanID())
		}
		md := rt.seen(method)
		sc := remoteContext(md)
		if sc.TraceID().String() != kubeletTraceID || sc.SpanID() != client.SpanContext.SpanID() || !sc.IsSampled() {
			t.Errorf("%s: the runtime saw traceparent %q, want trace %s with crishim's client span %s as parent",
				method, md.Get("traceparent"), kubeletTraceID, client.SpanContext.SpanID())
		}
		wantHeader(t, md, method, "tracestate", kubeletTracestate)
	}
	for _, s := range spans {
		if strings.HasSuffix(s.Name, "/Version") {
			t.Errorf("a relayed call made span %q", s.Name)
		}
	}
}

// TestCollectorReceivesCrishimSpans: spans reach an OTLP collector through
// the exporter Start builds, in the kubelet's trace, named for crishim.
func TestCollectorReceivesCrishimSpans(t *testing.T) {
	col := tracingtest.Start(t)
	tr, err := tracing.Start(context.Background(), tracing.Config{Endpoint: col.Endpoint}, "v9.9.9", discard())
	if err != nil {
		t.Fatal(err)
	}
	_, sock := startRuntime(t)
	callBoth(t, startCrishim(t, tr, sock))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	spans := col.Trace(kubeletTraceID)
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
		if s.Service != tracing.ServiceName || s.Resource["service.version"] != "v9.9.9" || s.Resource["host.name"] == "" {
			t.Errorf("span %s: resource %v, want service crishim v9.9.9 and a host name", s.Name, s.Resource)
		}
	}
	want := []string{"runtime.v1.RuntimeService/StartContainer", "runtime.v1.RuntimeService/ListContainers", "runtime.v1.RuntimeService/StartContainer"}
	if len(spans) != len(want) {
		t.Fatalf("collector got spans %q of the kubelet's trace, want %q", names, want)
	}
}

// TestCollectorDownCallsSucceed: with the collector away, calls succeed and
// shutdown returns within its deadline.
func TestCollectorDownCallsSucceed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	tr, err := tracing.Start(context.Background(), tracing.Config{Endpoint: dead, SamplingRatePerMillion: tracing.MaxSamplingRatePerMillion}, "v", discard())
	if err != nil {
		t.Fatal(err)
	}
	_, sock := startRuntime(t)
	c := startCrishim(t, tr, sock)
	for range 100 {
		callBoth(t, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = tr.Shutdown(ctx) // the spans are lost; returning is what counts
}

// spansOnceEnded is what exp holds once the span name of kind has ended
// (been exported), or what it holds after a minute, for findSpan to report.
func spansOnceEnded(t *testing.T, exp *tracetest.InMemoryExporter, name string, kind trace.SpanKind) tracetest.SpanStubs {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		spans := exp.GetSpans()
		for _, s := range spans {
			if s.Name == name && s.SpanKind == kind {
				return spans
			}
		}
		if time.Now().After(deadline) {
			return spans
		}
		time.Sleep(time.Millisecond)
	}
}

func findSpan(t *testing.T, spans tracetest.SpanStubs, name string, kind trace.SpanKind) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.Name == name && s.SpanKind == kind {
			return s
		}
	}
	var names []string
	for _, s := range spans {
		names = append(names, s.Name+"("+s.SpanKind.String()+")")
	}
	t.Fatalf("no %s span %q among %q", kind, name, names)
	return tracetest.SpanStub{}
}

// remoteContext parses the trace context the runtime received.
func remoteContext(md metadata.MD) trace.SpanContext {
	carrier := propagation.MapCarrier{}
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := md.Get(k); len(v) > 0 {
			carrier[k] = v[0]
		}
	}
	return trace.SpanContextFromContext(tracing.Propagator().Extract(context.Background(), carrier))
}
