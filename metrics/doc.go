// Package metrics holds crishim's Prometheus collectors, the gRPC
// interceptors that feed them, and the HTTP endpoints operators scrape and
// probe: /metrics, /healthz (crishim is alive) and /readyz (the runtime
// behind it answers).
package metrics
