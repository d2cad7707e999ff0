package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Idempotent counts the stop and remove calls for IDs the runtime did not
// know, which crishim answered OK as the CRI asks (see docs/operations.md).
// Its one label is the CRI method, from a fixed set of four. A nil
// *Idempotent counts nothing.
type Idempotent struct {
	notFound *prometheus.CounterVec
}

// NewIdempotent creates the counter on reg.
func NewIdempotent(reg prometheus.Registerer) *Idempotent {
	return &Idempotent{notFound: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
		Name: "crishim_idempotent_notfound_total",
		Help: "StopContainer, StopPodSandbox, RemoveContainer and RemovePodSandbox calls the runtime answered NotFound and crishim answered OK (the CRI makes them idempotent), by method.",
	}, []string{"method"})}
}

// NotFound counts one NotFound answered OK; method is the full method name.
func (m *Idempotent) NotFound(method string) {
	if m == nil {
		return
	}
	m.notFound.WithLabelValues(method).Inc()
}
