package metrics

import "github.com/prometheus/client_golang/prometheus"

// Idempotent counts the stop and remove calls for IDs the runtime did not
// know, which crishim answered OK as the CRI asks (see docs/operations.md).
// Its one label is the CRI method, from a fixed set of four. A nil
// *Idempotent counts nothing.
type Idempotent struct {
	notFound *prometheus.CounterVec
}

// NewIdempotent creates the collector; register the result on crishim's
// registry.
func NewIdempotent() *Idempotent {
	return &Idempotent{notFound: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crishim_idempotent_notfound_total",
		Help: "StopContainer, StopPodSandbox, RemoveContainer and RemovePodSandbox calls the runtime answered NotFound and crishim answered OK (the CRI makes them idempotent), by method.",
	}, []string{"method"})}
}

// Describe implements prometheus.Collector.
func (m *Idempotent) Describe(ch chan<- *prometheus.Desc) { m.notFound.Describe(ch) }

// Collect implements prometheus.Collector.
func (m *Idempotent) Collect(ch chan<- prometheus.Metric) { m.notFound.Collect(ch) }

// NotFound counts one NotFound answered OK; method is the full method name.
func (m *Idempotent) NotFound(method string) {
	if m == nil {
		return
	}
	m.notFound.WithLabelValues(method).Inc()
}
