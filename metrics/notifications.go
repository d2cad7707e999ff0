package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Notifications counts a node's work for the Notification API (notification/node). Label values come from
// fixed sets (result, operation); Notification and pod names are never labels. A nil
// *Notifications counts nothing.
type Notifications struct {
	runs      *prometheus.CounterVec
	watchUp   prometheus.Gauge
	apiErrors *prometheus.CounterVec
}

// NewNotifications creates the collectors on reg.
func NewNotifications(reg prometheus.Registerer) *Notifications {
	f := promauto.With(reg)
	return &Notifications{
		runs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_notifications_runs_total",
			Help: "Pods in which this node ran a Notification's notifier, by result (succeeded, failed).",
		}, []string{"result"}),
		watchUp: f.NewGauge(prometheus.GaugeOpts{
			Name: "crishim_notifications_watch_up",
			Help: "1 while the watch of this node's NodeNotifications is established, 0 while the apiserver cannot be reached.",
		}),
		apiErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_notifications_apiserver_errors_total",
			Help: "Failed apiserver requests of this node's Notification work, by operation (watch, get, update).",
		}, []string{"op"}),
	}
}

// Run counts one pod's run by result.
func (n *Notifications) Run(result string) {
	if n != nil {
		n.runs.WithLabelValues(result).Inc()
	}
}

// WatchUp records whether the watch is established.
func (n *Notifications) WatchUp(up bool) {
	if n == nil {
		return
	}
	v := 0.0
	if up {
		v = 1
	}
	n.watchUp.Set(v)
}

// APIError counts a failed apiserver request.
func (n *Notifications) APIError(op string) {
	if n != nil {
		n.apiErrors.WithLabelValues(op).Inc()
	}
}
