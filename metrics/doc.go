// Package metrics holds crishim's Prometheus collectors, the gRPC
// interceptors that feed them, and the HTTP endpoints operators scrape and
// probe: /metrics, /healthz (crishim is alive) and /readyz (the runtime
// behind it answers).
//
// New makes the registry /metrics serves. Each feature's set of collectors
// (Signals, Streaming, Audit, Config, ...) is made by its constructor on the
// prometheus.Registerer it is given, as promauto does: crishim passes
// Metrics.Registry, and a test passes a fresh prometheus.NewRegistry() and
// reads the values back from it (testutil.GatherAndCompare). A nil set
// counts nothing.
package metrics
