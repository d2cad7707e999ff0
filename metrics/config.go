package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Config counts reloads of crishim's configuration (SIGHUP, or a change of
// the config file or of the debug image allowlist file), as Prometheus and
// Alertmanager count theirs. A nil *Config counts nothing.
type Config struct {
	reloads     *prometheus.CounterVec
	lastSuccess prometheus.Gauge
	lastOK      prometheus.Gauge
}

// NewConfig creates the collectors on reg. Both results start at 0, so
// that an alert on failures sees a series from the start.
func NewConfig(reg prometheus.Registerer) *Config {
	f := promauto.With(reg)
	m := &Config{
		reloads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_config_reloads_total",
			Help: "Reloads of crishim's configuration (SIGHUP, or a change of --config or --debug-image-allowlist-file), by result (success, failure: the settings in force were kept).",
		}, []string{"result"}),
		lastSuccess: f.NewGauge(prometheus.GaugeOpts{
			Name: "crishim_config_last_reload_success_timestamp_seconds",
			Help: "When the configuration was last loaded successfully, at start or on reload (Unix time).",
		}),
		lastOK: f.NewGauge(prometheus.GaugeOpts{
			Name: "crishim_config_last_reload_successful",
			Help: "1 if the last reload of the configuration succeeded (or none failed since start), 0 if it failed and older settings are in force.",
		}),
	}
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("failure")
	m.lastOK.Set(1)
	m.lastSuccess.Set(float64(time.Now().UnixNano()) / 1e9)
	return m
}

// Reload counts one reload.
func (m *Config) Reload(ok bool) {
	if m == nil {
		return
	}
	if !ok {
		m.reloads.WithLabelValues("failure").Inc()
		m.lastOK.Set(0)
		return
	}
	m.reloads.WithLabelValues("success").Inc()
	m.lastOK.Set(1)
	m.lastSuccess.Set(float64(time.Now().UnixNano()) / 1e9)
}
