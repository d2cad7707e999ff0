package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"google.golang.org/grpc"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/cmd/crishim/internal/sdlisten"
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
	ln, err := listenSocket(cfg.listen, log)
	if err != nil {
		return nil, nil, err
	}
	return srv, ln, nil
}

// listenSocket serves the socket systemd passes (crishim.socket, socket
// activation), which must be the one at --listen's path, or else makes
// its own there. systemd's stays when crishim stops, so a restart refuses
// no call: connections wait in its backlog for the next crishim.
func listenSocket(path string, log *slog.Logger) (*proxy.Listener, error) {
	socks, err := sdlisten.Sockets()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	defer func() {
		for _, s := range socks {
			s.File.Close() // the listener holds a duplicate
		}
	}()
	switch len(socks) {
	case 0:
		return proxy.Listen(path)
	case 1:
		ln, err := proxy.ListenFile(socks[0].File, path)
		if err != nil {
			return nil, err
		}
		log.Info("serving the socket systemd passed", "listen", path, "name", socks[0].Name)
		return ln, nil
	default:
		names := make([]string, len(socks))
		for i, s := range socks {
			names[i] = s.Name
		}
		return nil, fmt.Errorf("socket activation: systemd passed %d sockets (%s), crishim serves one: give crishim.socket a single ListenStream=",
			len(socks), strings.Join(names, ", "))
	}
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
	// The socket accepts calls since Serve: a Type=notify unit
	// starts what is ordered after it (the kubelet) only now.
	if err := sdnotify.Notify(sdnotify.Ready); err != nil {
		log.Warn("could not tell systemd crishim is ready", "err", err)
	}
}
