package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Signals counts signal deliveries, emulated stops and notifier runs. Every
// label value comes from a fixed set (origin, delivery path, signal name
// from the Linux table, mode, outcome, gRPC code, notifier result and
// reason); container IDs and the notifier names pod owners choose are never
// labels. A nil *Signals counts nothing.
type Signals struct {
	deliveries *prometheus.CounterVec
	creates    *prometheus.CounterVec
	stops      *prometheus.CounterVec
	notifiers  *prometheus.CounterVec
	duration   *prometheus.HistogramVec
}

// NewSignals creates the collectors on reg.
func NewSignals(reg prometheus.Registerer) *Signals {
	f := promauto.With(reg)
	return &Signals{
		deliveries: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_signal_deliveries_total",
			Help: "Signals crishim sent to containers, by origin (api, notifier, stop), signal name, path (containerd, pidfd, none) and gRPC result code.",
		}, []string{"origin", "signal", "via", "code"}),
		creates: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_stop_signal_creates_total",
			Help: "CreateContainer calls with a stop_signal, by how crishim provided it (native, emulate, pass-through) and gRPC result code.",
		}, []string{"mode", "code"}),
		stops: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_stop_signal_stops_total",
			Help: "StopContainer calls for containers whose stop signal crishim emulates, by outcome (exited, killed, already_delivered, not_running, unemulated, delivery_failed).",
		}, []string{"outcome"}),
		notifiers: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_notifier_runs_total",
			Help: "Notifier runs, one per container, by action (exec, signal, none), result (succeeded, Timeout, Error) and reason.",
		}, []string{"action", "result", "reason"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "crishim_notifier_run_duration_seconds",
			Help: "Time from a notifier's action start to its result (action and probe), by action.",
			// 10 ms to about 5 min: notifier timeouts are seconds to minutes.
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 15),
		}, []string{"action"}),
	}
}

// Delivery counts one signal sent (or refused).
func (s *Signals) Delivery(origin, signal, via, code string) {
	if s == nil {
		return
	}
	s.deliveries.WithLabelValues(origin, signal, via, code).Inc()
}

// Create counts one CreateContainer that asked for a stop signal.
func (s *Signals) Create(mode, code string) {
	if s == nil {
		return
	}
	s.creates.WithLabelValues(mode, code).Inc()
}

// Stop counts one StopContainer of a container with an emulated stop signal.
func (s *Signals) Stop(outcome string) {
	if s == nil {
		return
	}
	s.stops.WithLabelValues(outcome).Inc()
}

// NotifierRun counts one notifier run in one container.
func (s *Signals) NotifierRun(action, result, reason string, took time.Duration) {
	if s == nil {
		return
	}
	s.notifiers.WithLabelValues(action, result, reason).Inc()
	s.duration.WithLabelValues(action).Observe(took.Seconds())
}
