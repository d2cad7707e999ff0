package metrics

import (
	"context"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/crishim/crishim/caller"
)

// otherMethod labels calls to methods crishim does not know by name: the
// method string comes from the client, and an unbounded label would let any
// client grow the registry without limit.
const otherMethod = "other"

// Metrics holds crishim's collectors on one registry.
type Metrics struct {
	Registry *prometheus.Registry
	known    map[string]bool

	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
	byCaller *prometheus.CounterVec
	runtime  *runtimeMetrics
	byLabel  sync.Map // method label -> *methodSeries

	protocolErrors *prometheus.CounterVec
}

// New registers crishim's collectors, the Go and process collectors and
// build information on a fresh registry. known lists the full method names
// that get their own label value.
func New(version, commit string, known []string) *Metrics {
	reg := prometheus.NewRegistry()
	f := promauto.With(reg)
	m := &Metrics{
		Registry: reg,
		known:    make(map[string]bool, len(known)),
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_grpc_requests_total",
			Help: "gRPC calls served by crishim, by full method and gRPC status code.",
		}, []string{"method", "code"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "crishim_grpc_request_duration_seconds",
			Help: "Time from receiving a gRPC call to its end, by full method.",
			// 50 µs (a pass-through of a fast call) to about 2 min (image pulls).
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 22),
		}, []string{"method"}),
		inFlight: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "crishim_grpc_requests_in_flight",
			Help: "gRPC calls being served, by full method.",
		}, []string{"method"}),
		byCaller: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_cri_calls_by_caller_total",
			Help: "CRI and crishim.v1 calls by caller (kubelet: the kubelet's process; other: anything else on the node), full method and gRPC status code.",
		}, []string{"caller", "method", "code"}),
		runtime:        newRuntimeMetrics(reg),
		protocolErrors: newProtocolErrors(reg),
	}
	for _, k := range known {
		m.known[k] = true
	}
	goVersion := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
	}
	build := f.NewGauge(prometheus.GaugeOpts{
		Name:        "crishim_build_info",
		Help:        "Always 1; labels say which crishim build runs.",
		ConstLabels: prometheus.Labels{"version": version, "commit": commit, "goversion": goVersion},
	})
	build.Set(1)
	reg.MustRegister(collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *Metrics) label(method string) string {
	if m.known[method] {
		return method
	}
	return otherMethod
}

// methodSeries caches one method label's children: looking them up by
// label values on every call costs more than relaying a small call.
type methodSeries struct {
	m        *Metrics
	label    string
	inFlight prometheus.Gauge
	duration prometheus.Observer
	mu       sync.Mutex
	byCode   [codes.Unauthenticated + 1]prometheus.Counter
	// callers are the method's calls by caller: the kubelet's, the others'.
	callers [2]*callerSeries
}

// callerSeries is a methodSeries for one caller label: it counts a call in
// the method's series and by caller.
type callerSeries struct {
	*methodSeries
	caller string
	mu     sync.Mutex
	byCode [codes.Unauthenticated + 1]prometheus.Counter
}

// The caller labels: bounded, whatever the callers.
const (
	callerKubelet = "kubelet"
	callerOther   = "other"
)

func (m *Metrics) series(method string) *methodSeries {
	label := m.label(method)
	if s, ok := m.byLabel.Load(label); ok {
		return s.(*methodSeries)
	}
	s := &methodSeries{m: m, label: label, inFlight: m.inFlight.WithLabelValues(label), duration: m.duration.WithLabelValues(label)}
	s.callers = [2]*callerSeries{{methodSeries: s, caller: callerKubelet}, {methodSeries: s, caller: callerOther}}
	actual, _ := m.byLabel.LoadOrStore(label, s)
	return actual.(*methodSeries)
}

func (s *methodSeries) counter(code codes.Code) prometheus.Counter {
	if int(code) >= len(s.byCode) {
		return s.m.requests.WithLabelValues(s.label, code.String())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byCode[code] == nil {
		s.byCode[code] = s.m.requests.WithLabelValues(s.label, code.String())
	}
	return s.byCode[code]
}

func (c *callerSeries) counter(code codes.Code) prometheus.Counter {
	if int(code) >= len(c.byCode) {
		return c.m.byCaller.WithLabelValues(c.caller, c.label, code.String())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byCode[code] == nil {
		c.byCode[code] = c.m.byCaller.WithLabelValues(c.caller, c.label, code.String())
	}
	return c.byCode[code]
}

// Ended counts a call that Started as done, for its method and caller.
func (c *callerSeries) Ended(code codes.Code, took time.Duration) {
	c.methodSeries.Ended(code, took)
	c.counter(code).Inc()
}

// Started counts a call as in flight.
func (s *methodSeries) Started() { s.inFlight.Inc() }

// Ended counts a call that Started as done.
func (s *methodSeries) Ended(code codes.Code, took time.Duration) {
	s.duration.Observe(took.Seconds())
	s.counter(code).Inc()
	s.inFlight.Dec()
}

// MethodObserver is proxy.MethodObserver, spelled out: this package is
// imported by the proxy's tests, so it cannot import the proxy.
type MethodObserver = interface {
	Started()
	Ended(code codes.Code, took time.Duration)
}

// Method returns the series of one method as the kubelet calls it, for the
// relay (proxy.CallObserver), which keeps them per method.
func (m *Metrics) Method(method string) MethodObserver { return m.series(method).callers[0] }

// OtherMethod is Method for callers other than the kubelet
// (proxy.OtherCallers).
func (m *Metrics) OtherMethod(method string) MethodObserver { return m.series(method).callers[1] }

// CallStarted counts a call of p (nil: unknown) as in flight; the function
// it returns ends the call with its status code. The interceptors use it;
// the relay counts the calls it passes through, which no interceptor
// sees, in the same series through Method and OtherMethod.
func (m *Metrics) CallStarted(method string, p *caller.Process) func(codes.Code) {
	s := m.series(method).callers[1]
	if p.IsKubelet() {
		s = s.callers[0]
	}
	s.Started()
	start := time.Now()
	return func(code codes.Code) { s.Ended(code, time.Since(start)) }
}

// UnaryInterceptor measures intercepted unary calls.
func (m *Metrics) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		done := m.CallStarted(info.FullMethod, caller.FromContext(ctx))
		resp, err := handler(ctx, req)
		done(status.Code(err))
		return resp, err
	}
}

// StreamInterceptor measures streaming calls and the audited calls of
// other callers, which crishim's gRPC server relays as streams.
func (m *Metrics) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		var p *caller.Process
		if ss != nil { // tests call with none
			p = caller.FromContext(ss.Context())
		}
		done := m.CallStarted(info.FullMethod, p)
		err := handler(srv, ss)
		done(status.Code(err))
		return err
	}
}
