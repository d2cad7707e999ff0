package e2e

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/tools/remotecommand"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/crishim/crishim/tracing/tracingtest"
)

// tracedClient is the kubelet's CRI client with tracing on: every call is a
// sampled client span, kept in memory so the test knows its IDs.
func tracedClient(t *testing.T, endpoint string) (internalapi.RuntimeService, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx := context.Background()
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(2 * time.Minute).WithTracerProvider(tp).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close(ctx) })
	return rs, exp
}

// kubeletSpan is the first client span the kubelet's client made for method.
func kubeletSpan(t *testing.T, exp *tracetest.InMemoryExporter, method string) tracetest.SpanStub {
	t.Helper()
	return kubeletSpans(t, exp, method)[0]
}

// lastKubeletSpan is the last one.
func lastKubeletSpan(t *testing.T, exp *tracetest.InMemoryExporter, method string) tracetest.SpanStub {
	t.Helper()
	spans := kubeletSpans(t, exp, method)
	return spans[len(spans)-1]
}

func kubeletSpans(t *testing.T, exp *tracetest.InMemoryExporter, method string) []tracetest.SpanStub {
	t.Helper()
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "runtime.v1.RuntimeService/"+method && s.SpanKind == trace.SpanKindClient {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		t.Fatalf("the kubelet's client made no span for %s", method)
	}
	return out
}

// waitSpan polls the collector until the trace holds crishim's span of
// that kind and name, and returns the trace's spans: crishim exports in
// batches on its own schedule, a span after those that ended before it. The
// deadline only turns a missing span into a failure.
func waitSpan(t *testing.T, col *tracingtest.Collector, traceID, kind, name string) []tracingtest.Span {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		spans := col.Trace(traceID)
		if _, ok := spanNamed(spans, kind, name); ok || time.Now().After(deadline) {
			return spans
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func spanNamed(spans []tracingtest.Span, kind, name string) (tracingtest.Span, bool) {
	for _, s := range spans {
		if s.Kind == kind && s.Name == name {
			return s, true
		}
	}
	return tracingtest.Span{}, false
}

// TestTracingExportsInterceptedCallsAndStreams: crishim with
// --tracing-endpoint, in front of containerd, driven by the kubelet's
// client with tracing on. An intercepted call (CreateContainer) and an exec
// (the Exec call and its stream session) show up at the collector in the
// kubelet's traces, each crishim span a child of the kubelet's or of
// crishim's own; relayed calls make no span.
func TestTracingExportsInterceptedCallsAndStreams(t *testing.T) {
	col := tracingtest.Start(t)
	p := startCrishim(t, testbed.Endpoint, "--tracing-endpoint", col.Endpoint)
	rs, kubelet := tracedClient(t, p.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "tracing", sleeperScript)

	create := kubeletSpan(t, kubelet, "CreateContainer")
	spans := waitSpan(t, col, create.SpanContext.TraceID().String(), "server", "runtime.v1.RuntimeService/CreateContainer")
	server, ok := spanNamed(spans, "server", "runtime.v1.RuntimeService/CreateContainer")
	if !ok || server.ParentSpanID != create.SpanContext.SpanID().String() || server.Service != "crishim" {
		t.Fatalf("CreateContainer: crishim's spans %+v; want a server span of service crishim under the kubelet's %s", spans, create.SpanContext.SpanID())
	}
	for _, s := range spans {
		if s.SpanID != server.SpanID && s.ParentSpanID != server.SpanID {
			t.Errorf("CreateContainer: span %s is under %s, want crishim's server span %s", s.Name, s.ParentSpanID, server.SpanID)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := []string{"sh", "-c", "echo secret-command-marker; exit 3"}
	resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: cmd, Stdout: true})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	var stdout bytes.Buffer
	err = spdyExecutor(t, resp.Url).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout})
	if exitCode(err) != 3 {
		t.Fatalf("exec stream: %v, want exit code 3", err)
	}
	exec := kubeletSpan(t, kubelet, "Exec")
	spans = waitSpan(t, col, exec.SpanContext.TraceID().String(), "server", "crishim.stream/exec")
	call, ok := spanNamed(spans, "server", "runtime.v1.RuntimeService/Exec")
	if !ok || call.ParentSpanID != exec.SpanContext.SpanID().String() {
		t.Fatalf("Exec: crishim's spans %+v; want a server span under the kubelet's %s", spans, exec.SpanContext.SpanID())
	}
	sess, ok := spanNamed(spans, "server", "crishim.stream/exec")
	if !ok || sess.ParentSpanID != call.SpanID {
		t.Fatalf("exec session: spans %+v; want crishim.stream/exec under the Exec call %s", spans, call.SpanID)
	}
	if sess.Attributes["container.id"] != ctrID || sess.Attributes["crishim.stream.protocol"] != "spdy" {
		t.Errorf("session span attributes %v: want container.id %s, protocol spdy", sess.Attributes, ctrID)
	}
	for k, v := range sess.Attributes {
		if strings.Contains(v, "secret-command-marker") {
			t.Errorf("session span attribute %s holds the command: %q", k, v)
		}
	}
	var toRuntime bool
	for _, s := range spans {
		if s.ParentSpanID == sess.SpanID && s.Kind == "client" && s.Name == "runtime.v1.RuntimeService/Exec" {
			toRuntime = true
		}
	}
	if !toRuntime {
		t.Errorf("exec session: no client span of its Exec to containerd among %+v", spans)
	}

	// Relayed: the kubelet's trace context goes to containerd, crishim makes
	// nothing of it.
	if _, err := rs.Version(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	// An intercepted call after it: once its span arrived, a span of
	// Version would have too.
	if err := rs.StartContainer(ctx, ctrID); err == nil {
		t.Fatal("StartContainer of a running container succeeded")
	}
	version := kubeletSpan(t, kubelet, "Version")
	run := kubeletSpan(t, kubelet, "RunPodSandbox")
	waitSpan(t, col, lastKubeletSpan(t, kubelet, "StartContainer").SpanContext.TraceID().String(), "server", "runtime.v1.RuntimeService/StartContainer")
	for _, s := range []tracetest.SpanStub{version, run} {
		if got := col.Trace(s.SpanContext.TraceID().String()); len(got) != 0 {
			t.Errorf("relayed %s made crishim spans %+v", s.Name, got)
		}
	}
}

// TestTracingCollectorDown: a collector that is not there costs the calls
// and streams nothing: they succeed, and crishim stays healthy and stops
// cleanly.
func TestTracingCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	p := startCrishim(t, testbed.Endpoint, "--tracing-endpoint", dead, "--tracing-sampling-rate-per-million", "1000000")
	rs, _ := tracedClient(t, p.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "tracing-down", sleeperScript)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 20 {
		if _, err := rs.ContainerStatus(ctx, ctrID, false); err != nil {
			t.Fatalf("ContainerStatus: %v", err)
		}
		resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"true"}, Stdout: true})
		if err != nil {
			t.Fatalf("Exec: %v", err)
		}
		if err := spdyExecutor(t, resp.Url).StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &bytes.Buffer{}}); err != nil {
			t.Fatalf("exec stream: %v", err)
		}
	}
	if v := scrape(t, p.Metrics)["crishim_runtime_up{backend=\"runtime\"}"]; v != 1 {
		t.Errorf("crishim_runtime_up = %v, want 1", v)
	}
}
