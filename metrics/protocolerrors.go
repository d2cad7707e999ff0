package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// newProtocolErrors counts the protocol errors of the h2 relay's peers.
// The reason label takes only the relay's fixed set of values
// (proxy.ProtocolErrorReasons), never anything a peer sent.
func newProtocolErrors(reg prometheus.Registerer) *prometheus.CounterVec {
	return promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
		Name: "crishim_relay_protocol_errors_total",
		Help: "Protocol errors of peers of the h2 relay answered with GOAWAY or RST_STREAM, by reason.",
	}, []string{"reason"})
}

// ProtocolError counts one protocol error of a client or runtime of the h2
// relay: crishim answered it with GOAWAY or RST_STREAM.
func (m *Metrics) ProtocolError(reason string) {
	m.protocolErrors.WithLabelValues(reason).Inc()
}

// InitProtocolErrors makes every reason's series exist at zero, so that a
// rate over it is defined before the first error.
func (m *Metrics) InitProtocolErrors(reasons []string) {
	for _, r := range reasons {
		m.protocolErrors.WithLabelValues(r)
	}
}
