package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// runtimeMetrics follow crishim's connections to the runtime.
type runtimeMetrics struct {
	up         *prometheus.GaugeVec
	reconnects *prometheus.CounterVec

	mu       sync.Mutex
	wasDown  map[string]bool
	everSeen map[string]bool
}

func newRuntimeMetrics(reg prometheus.Registerer) *runtimeMetrics {
	f := promauto.With(reg)
	return &runtimeMetrics{
		up: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "crishim_runtime_up",
			Help: "1 while crishim's connection to the runtime (backend=runtime) or image service (backend=image) is established, else 0.",
		}, []string{"backend"}),
		reconnects: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_runtime_reconnects_total",
			Help: "Times crishim's connection to the runtime came back after being lost.",
		}, []string{"backend"}),
		wasDown:  map[string]bool{},
		everSeen: map[string]bool{},
	}
}

// RuntimeConnection records that the connection to backend ("runtime" or
// "image") went up or down. Only coming back after a loss counts as a
// reconnect; the first connection does not.
func (m *Metrics) RuntimeConnection(backend string, up bool) {
	r := m.runtime
	r.mu.Lock()
	defer r.mu.Unlock()
	if up {
		r.up.WithLabelValues(backend).Set(1)
		if r.wasDown[backend] && r.everSeen[backend] {
			r.reconnects.WithLabelValues(backend).Inc()
		}
		r.everSeen[backend] = true
		r.wasDown[backend] = false
		return
	}
	r.up.WithLabelValues(backend).Set(0)
	r.wasDown[backend] = true
}
