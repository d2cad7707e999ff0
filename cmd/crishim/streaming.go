package main

import (
	"context"
	"log/slog"

	"github.com/spf13/pflag"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/crishim/crishim/proxy"
	"github.com/crishim/crishim/streaming"
)

// streamingConfig holds the flags of crishim's streaming server.
type streamingConfig struct{ streaming.Config }

func (c *streamingConfig) register(fs *pflag.FlagSet) {
	d := streaming.DefaultConfig()
	fs.StringVar(&c.Address, "streaming-address", d.Address, "HOST:PORT of crishim's streaming server for exec, attach and port-forward (port 0 picks one); empty passes the runtime's own URLs through")
	fs.DurationVar(&c.TokenTTL, "stream-token-ttl", d.TokenTTL, "how long a stream URL stays good")
	fs.IntVar(&c.MaxTokens, "stream-max-tokens", d.MaxTokens, "most stream URLs outstanding; beyond, Exec, Attach and PortForward fail with ResourceExhausted")
	checkValue(fs, "stream-token-ttl", positive)
	checkValue(fs, "stream-max-tokens", positive)
	fs.DurationVar(&c.IdleTimeout, "stream-idle-timeout", d.IdleTimeout, "end a WebSocket exec, attach or port-forward session after this long without a message (port-forward: a byte) either way (the kubelet's and containerd's default); 0 never")
	fs.IntVar(&c.MaxWebSocketSessions, "stream-max-websocket-sessions", d.MaxWebSocketSessions, "most WebSocket exec, attach and port-forward sessions open at once; beyond, a new one is refused with HTTP 429 (SPDY sessions are not counted)")
	checkValue(fs, "stream-idle-timeout", nonNegative)
	checkValue(fs, "stream-max-websocket-sessions", positive)
	fs.StringVar(&c.TLSCertFile, "streaming-tls-cert", "", "PEM certificate: serve streams over HTTPS (with --streaming-tls-key)")
	fs.StringVar(&c.TLSKeyFile, "streaming-tls-key", "", "PEM private key of --streaming-tls-cert")
	fs.BoolVar(&c.AllowInsecure, "streaming-allow-insecure", false, "allow plain HTTP on a non-loopback --streaming-address")
}

func (c *streamingConfig) finish() error {
	if c.Address == "" {
		return nil
	}
	return c.Validate()
}

// listenStreaming binds the streaming server; nil when disabled. deps
// brings the other features' collaborators (metrics, audit log, record
// errors, tracer); the runtime is backend's, the log is log's.
func listenStreaming(c streamingConfig, backend *proxy.Backend, deps streaming.Deps, log *slog.Logger) (*streaming.Server, error) {
	if c.Address == "" {
		return nil, nil
	}
	// The upgrade-aware proxy logs through klog; without this its lines
	// would bypass crishim's log format.
	klog.SetSlogLogger(log.With("component", "streaming-proxy"))
	deps.Runtime = runtimeapi.NewRuntimeServiceClient(backend.RuntimeConn())
	deps.Log = log.With("component", "streaming")
	return streaming.Listen(c.Config, deps)
}

// readiness adds the streaming server to the runtime's readiness: a crishim
// handing out URLs nobody serves is not ready.
func readiness(runtimeReady func(context.Context) error, s *streaming.Server) func(context.Context) error {
	if s == nil {
		return runtimeReady
	}
	return func(ctx context.Context) error {
		if err := s.Ready(ctx); err != nil {
			return err
		}
		return runtimeReady(ctx)
	}
}

func serveStreaming(s *streaming.Server, errc chan<- error) {
	if s != nil {
		go func() { errc <- s.Serve() }()
	}
}

// shutdownStreaming runs beside the gRPC server's shutdown, under the same
// deadline, so that open streams get the whole timeout too.
func shutdownStreaming(ctx context.Context, s *streaming.Server, log *slog.Logger) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if s == nil {
			return
		}
		if err := s.Shutdown(ctx); err != nil {
			log.Warn("streaming server shutdown", "err", err)
		}
	}()
	return done
}

func streamingURL(s *streaming.Server) string {
	if s == nil {
		return "disabled"
	}
	return s.BaseURL()
}
