package metrics

import "github.com/prometheus/client_golang/prometheus"

// DebugImages counts the debug image allowlist's decisions. Its one label
// is the result, never the image: image names are unbounded. A nil
// *DebugImages counts nothing.
type DebugImages struct {
	checks *prometheus.CounterVec
}

// NewDebugImages creates the collector; register the result on crishim's
// registry.
func NewDebugImages() *DebugImages {
	return &DebugImages{checks: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "crishim_debug_image_checks_total",
		Help: "Debug container images checked against the allowlist (--debug-image-allowlist, --debug-image-allowlist-file), by result (allowed, refused, error: the runtime could not say what the image is).",
	}, []string{"result"})}
}

// Describe implements prometheus.Collector.
func (m *DebugImages) Describe(ch chan<- *prometheus.Desc) { m.checks.Describe(ch) }

// Collect implements prometheus.Collector.
func (m *DebugImages) Collect(ch chan<- prometheus.Metric) { m.checks.Collect(ch) }

// Check counts one decision: allowed, refused or error.
func (m *DebugImages) Check(result string) {
	if m == nil {
		return
	}
	m.checks.WithLabelValues(result).Inc()
}
