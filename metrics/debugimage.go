package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// DebugImages counts the debug image allowlist's decisions. Its one label
// is the result, never the image: image names are unbounded. A nil
// *DebugImages counts nothing.
type DebugImages struct {
	checks  *prometheus.CounterVec
	lookups *prometheus.CounterVec
}

// NewDebugImages creates the counters on reg.
func NewDebugImages(reg prometheus.Registerer) *DebugImages {
	f := promauto.With(reg)
	return &DebugImages{
		checks: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_debug_image_checks_total",
			Help: "Debug container images checked against the allowlist (--debug-image-allowlist, --debug-image-allowlist-file), by result (allowed, refused, error: the runtime could not say what the image is).",
		}, []string{"result"}),
		lookups: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_debug_container_lookups_total",
			Help: "Containers the kubelet creates without PID namespace TARGET, looked up in their pod's spec to find its ephemeral containers, by result (ephemeral, regular, unknown: no API server, or it could not say; not treated as a debug container).",
		}, []string{"result"}),
	}
}

// Lookup counts one pod spec lookup: ephemeral, regular or unknown.
func (m *DebugImages) Lookup(result string) {
	if m == nil {
		return
	}
	m.lookups.WithLabelValues(result).Inc()
}

// Check counts one decision: allowed, refused or error.
func (m *DebugImages) Check(result string) {
	if m == nil {
		return
	}
	m.checks.WithLabelValues(result).Inc()
}
