package main

import (
	"context"
	"log/slog"

	"google.golang.org/grpc"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/cmd/crishim/internal/sdnotify"
	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/proxy"
	"github.com/crishim/crishim/shim"
	"github.com/crishim/crishim/streaming"
	"github.com/crishim/crishim/tracing"
)

// servers are what runs once crishim has started; shutdown stops them.
type servers struct {
	cri     *proxy.Server
	socket  *proxy.Listener     // the kubelet's socket, cri's
	streams *streaming.Server   // nil: disabled
	metrics *metrics.HTTPServer // nil: disabled

	stopNotify context.CancelFunc // ends the Notification controller
	notifyDone <-chan struct{}    // closed once it has ended; nil: not configured
}

// listenCRI builds the server of the kubelet's socket, which relays every
// call to the runtime but those the shim intercepts, and binds the socket.
func listenCRI(cfg *config, backend *proxy.Backend, sh *shim.Shim, auditLog *audit.Log, m *metrics.Metrics, tr *tracing.Tracing, log *slog.Logger) (*proxy.Server, *proxy.Listener, error) {
	intercepted := sh.Intercepted()
	auditUnary, auditStream := sh.CRICallInterceptors()
	srv, err := proxy.NewServer(backend, proxy.ServerOptions{
		MaxMessageSize: cfg.maxMessageSize,
		Intercept:      intercepted,
		Services:       sh.Services(),
		Unary:          []grpc.UnaryServerInterceptor{m.UnaryInterceptor(), auditUnary, proxy.LogUnary(log)},
		Stream:         []grpc.StreamServerInterceptor{m.StreamInterceptor(), auditStream, proxy.LogStream(log)},
		Audited:        shim.CRICallsAudited(auditLog.CRICalls()),
		// Calls the relay passes through reach no interceptor: they
		// are counted into the same series and logged at the same levels.
		Observe:      m,
		Log:          log,
		StatsHandler: tr.ServerHandler(proxy.ServedMethods(intercepted, sh.Services())),
	})
	if err != nil {
		return nil, nil, err
	}
	ln, err := proxy.Listen(cfg.listen)
	if err != nil {
		return nil, nil, err
	}
	return srv, ln, nil
}

// serve starts serving on every listener; each server that stops by
// itself sends its error.
func (s *servers) serve() <-chan error {
	errc := make(chan error, 3)
	serveStreaming(s.streams, errc)
	go func() { errc <- s.cri.Serve(s.socket) }()
	if s.metrics != nil {
		go func() { errc <- s.metrics.Serve() }()
	}
	return errc
}

// announceServing tells the log, and systemd, that crishim serves.
func announceServing(cfg *config, s *servers, log *slog.Logger) {
	log.Info("crishim serving", "version", version, "listen", s.socket.Path(),
		"runtime_endpoint", cfg.runtimeEndpoint, "image_endpoint", cfg.imageEndpoint, "metrics", metricsAddr(s.metrics), "streaming", streamingURL(s.streams))
	// The socket accepts connections since Listen: a Type=notify unit
	// starts what is ordered after it (the kubelet) only now.
	if err := sdnotify.Notify(sdnotify.Ready); err != nil {
		log.Warn("could not tell systemd crishim is ready", "err", err)
	}
}
