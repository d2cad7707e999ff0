package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Streaming holds the collectors of crishim's streaming server. Labels are
// bounded: kind is exec, attach or portforward, reason and direction come
// from fixed sets; tokens and container IDs never become labels.
type Streaming struct {
	tokensIssued   *prometheus.CounterVec
	tokensExpired  *prometheus.CounterVec
	tokensRejected *prometheus.CounterVec
	sessionsActive *prometheus.GaugeVec
	sessionsTotal  *prometheus.CounterVec
	bytes          *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	parseStopped   *prometheus.CounterVec
	wsActive       prometheus.Gauge
	wsRefused      prometheus.Counter
}

// NewStreaming creates the streaming collectors on reg.
func NewStreaming(reg prometheus.Registerer) *Streaming {
	f := promauto.With(reg)
	return &Streaming{
		tokensIssued: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_stream_tokens_issued_total",
			Help: "Stream tokens handed out in answer to CRI Exec, Attach and PortForward, by kind.",
		}, []string{"kind"}),
		tokensExpired: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_stream_tokens_expired_total",
			Help: "Stream tokens that reached --stream-token-ttl unused, by kind.",
		}, []string{"kind"}),
		tokensRejected: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_stream_tokens_rejected_total",
			Help: "Stream tokens refused: reason full (CRI call answered ResourceExhausted), unknown or expired (HTTP 404), by kind.",
		}, []string{"kind", "reason"}),
		sessionsActive: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "crishim_stream_sessions_active",
			Help: "Streams being proxied to the runtime, by kind.",
		}, []string{"kind"}),
		sessionsTotal: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_stream_sessions_total",
			Help: "Streams started (token accepted, runtime asked for its URL), by kind.",
		}, []string{"kind"}),
		bytes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_stream_bytes_total",
			Help: "Bytes proxied between clients and the runtime's streaming server, upgrade handshake included, by kind and direction (to_runtime, to_client).",
		}, []string{"kind", "direction"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "crishim_stream_session_duration_seconds",
			Help: "Time from accepting a stream token to the end of the stream, by kind.",
			// 10 ms (a refused upgrade) to about 12 h (a forgotten shell).
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 12),
		}, []string{"kind"}),
		parseStopped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "crishim_stream_parse_stopped_total",
			Help: "Parsed SPDY sessions (audited or recorded) whose parse stopped on a frame over crishim's limits or not SPDY; the session went on unparsed (no exit code, recording or ports from then on), by kind.",
		}, []string{"kind"}),
		wsActive: f.NewGauge(prometheus.GaugeOpts{
			Name: "crishim_stream_websocket_sessions_active",
			Help: "WebSocket exec, attach and port-forward sessions open, served by crishim and run on the runtime over SPDY; at most --stream-max-websocket-sessions.",
		}),
		wsRefused: f.NewCounter(prometheus.CounterOpts{
			Name: "crishim_stream_websocket_sessions_refused_total",
			Help: "WebSocket exec, attach and port-forward sessions refused (HTTP 429) because --stream-max-websocket-sessions were open.",
		}),
	}
}

// WebSocketSessionStarted counts a WebSocket session open until the
// function returned is called.
func (s *Streaming) WebSocketSessionStarted() (ended func()) {
	s.wsActive.Inc()
	return s.wsActive.Dec
}

// WebSocketSessionRefused counts a WebSocket session refused at the limit.
func (s *Streaming) WebSocketSessionRefused() { s.wsRefused.Inc() }

// ParseStopped counts a session whose SPDY parse stopped early.
func (s *Streaming) ParseStopped(kind string) { s.parseStopped.WithLabelValues(kind).Inc() }

// TokenIssued counts a token handed out.
func (s *Streaming) TokenIssued(kind string) { s.tokensIssued.WithLabelValues(kind).Inc() }

// TokenExpired counts a token that reached its TTL unused.
func (s *Streaming) TokenExpired(kind string) { s.tokensExpired.WithLabelValues(kind).Inc() }

// TokenRejected counts a refused token: reason is full, unknown or expired.
func (s *Streaming) TokenRejected(kind, reason string) {
	s.tokensRejected.WithLabelValues(kind, reason).Inc()
}

// StreamSession measures one proxied stream. Its counters are resolved once
// so that counting bytes on every read and write costs an atomic add only.
type StreamSession struct {
	active              prometheus.Gauge
	duration            prometheus.Observer
	toRuntime, toClient prometheus.Counter
	start               time.Time
}

// SessionStarted counts a stream and returns what measures it until End.
func (s *Streaming) SessionStarted(kind string) *StreamSession {
	s.sessionsTotal.WithLabelValues(kind).Inc()
	ss := &StreamSession{
		active:    s.sessionsActive.WithLabelValues(kind),
		duration:  s.duration.WithLabelValues(kind),
		toRuntime: s.bytes.WithLabelValues(kind, "to_runtime"),
		toClient:  s.bytes.WithLabelValues(kind, "to_client"),
		start:     time.Now(),
	}
	ss.active.Inc()
	return ss
}

// ToRuntime counts bytes sent from the client to the runtime.
func (ss *StreamSession) ToRuntime(n int) { ss.toRuntime.Add(float64(n)) }

// ToClient counts bytes sent from the runtime to the client.
func (ss *StreamSession) ToClient(n int) { ss.toClient.Add(float64(n)) }

// End records the stream's end.
func (ss *StreamSession) End() {
	ss.active.Dec()
	ss.duration.Observe(time.Since(ss.start).Seconds())
}
