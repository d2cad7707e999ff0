package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config counts reloads of crishim's configuration (SIGHUP, or a change of
// the config file or of the debug image allowlist file), as Prometheus and
// Alertmanager count theirs. A nil *Config counts nothing.
type Config struct {
	reloads     *prometheus.CounterVec
	lastSuccess prometheus.Gauge
	lastOK      prometheus.Gauge
}

// NewConfig creates the collector; register the result on crishim's
// registry. Both results start at 0, so that an alert on failures sees a
// series from the start.
func NewConfig() *Config {
	m := &Config{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_config_reloads_total",
			Help: "Reloads of crishim's configuration (SIGHUP, or a change of --config or --debug-image-allowlist-file), by result (success, failure: the settings in force were kept).",
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "crishim_config_last_reload_success_timestamp_seconds",
			Help: "When the configuration was last loaded successfully, at start or on reload (Unix time).",
		}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
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

// Describe implements prometheus.Collector.
func (m *Config) Describe(ch chan<- *prometheus.Desc) {
	m.reloads.Describe(ch)
	m.lastSuccess.Describe(ch)
	m.lastOK.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Config) Collect(ch chan<- prometheus.Metric) {
	m.reloads.Collect(ch)
	m.lastSuccess.Collect(ch)
	m.lastOK.Collect(ch)
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
