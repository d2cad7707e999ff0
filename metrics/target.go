package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// PIDTarget counts CRI TARGET PID namespace requests (debug containers). Its
// label values come from fixed sets (call, mode, gRPC code), never from
// container IDs or names, so the series count stays bounded. A nil
// *PIDTarget counts nothing, for tests and callers without metrics.
type PIDTarget struct {
	requests *prometheus.CounterVec
	failures *prometheus.CounterVec
}

// NewPIDTarget creates the TARGET counters on reg.
func NewPIDTarget(reg prometheus.Registerer) *PIDTarget {
	f := promauto.With(reg)
	return &PIDTarget{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_pid_target_requests_total",
			Help: "CreateContainer and StartContainer calls for containers with PID namespace TARGET, by call (create, start), mode (native, emulate, reject) and gRPC result code.",
		}, []string{"call", "mode", "code"}),
		failures: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_pid_target_verification_failures_total",
			Help: "Containers started with PID namespace TARGET that crishim found outside the target's PID namespace (or could not check) and stopped, by mode.",
		}, []string{"mode"}),
	}
}

// Request counts one TARGET create or start.
func (t *PIDTarget) Request(call, mode, code string) {
	if t == nil {
		return
	}
	t.requests.WithLabelValues(call, mode, code).Inc()
}

// VerificationFailure counts one container stopped because it did not share
// its target's PID namespace.
func (t *PIDTarget) VerificationFailure(mode string) {
	if t == nil {
		return
	}
	t.failures.WithLabelValues(mode).Inc()
}
