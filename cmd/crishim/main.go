// Command crishim is the CRI interposer daemon: the kubelet talks to its
// socket as if it were the runtime, and crishim forwards every call to the
// real runtime, intercepting the few where it adds something.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/cmd/crishim/internal/hup"
	"github.com/crishim/crishim/cmd/crishim/internal/sdnotify"
	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/proxy"
	"github.com/crishim/crishim/shim"
	"github.com/crishim/crishim/streaming"
	"github.com/crishim/crishim/tracing"
)

// version and commit are set at build time (-ldflags "-X main.version=...").
var (
	version = "dev"
	commit  = "unknown"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// serve runs the daemon: crishim with no command.
func serve(opts *rootOptions) error {
	src := opts.source()
	ld, err := src.load()
	if err != nil {
		return usageError{err}
	}
	cfg := ld.cfg
	procs := setProcs()
	level := new(slog.LevelVar)
	level.Set(cfg.logLevel)
	log := newLogger(os.Stderr, cfg.logFormat, level)
	log.Debug("go runtime", "gomaxprocs", procs)
	if src.file != "" {
		log.Info("configuration loaded", "file", src.file)
	}
	// SIGHUP has been caught since package init (package hup); one sent
	// during start is kept and reloads once the reloader runs.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Once shutdown has begun, a second signal gets its default action: an
	// operator who presses ^C twice wants crishim gone now.
	context.AfterFunc(ctx, stop)
	if err := run(ctx, ld, &reloader{src: src, level: level, hup: hup.C}, log); err != nil {
		log.Error("crishim failed", "err", err)
		return errLogged
	}
	return nil
}

// run serves until ctx is canceled (SIGTERM/SIGINT), then shuts down: stop
// accepting, let in-flight calls finish within the shutdown timeout, remove
// the socket.
func run(ctx context.Context, ld loaded, rl *reloader, log *slog.Logger) error {
	cfg := ld.cfg
	if err := preflight(cfg); err != nil {
		return err
	}
	tr, err := tracing.Start(ctx, cfg.tracing.Config, version, log)
	if err != nil {
		return err
	}
	// The normal path flushes the spans after the servers stopped, within
	// the shutdown timeout; this covers the early returns (a second
	// shutdown does nothing).
	defer func() {
		tctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
		defer cancel()
		stopTracing(tctx, tr, log)
	}()
	backend, err := proxy.Dial(proxy.BackendOptions{
		RuntimeEndpoint: cfg.runtimeEndpoint,
		ImageEndpoint:   cfg.imageEndpoint,
		MaxMessageSize:  cfg.maxMessageSize,
		StatsHandler:    tr.ClientHandler(),
	})
	if err != nil {
		return err
	}
	defer backend.Close()
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()

	ctrd, err := shim.DialContainerd(cfg.target.containerdAddress, cfg.target.containerdNamespace)
	if err != nil {
		return err
	}
	defer ctrd.Close()
	known := proxy.MethodNames(append(proxy.CRIServices, shim.ServiceDescs()...)...)
	m := metrics.New(version, commit, known)
	m.InitProtocolErrors(proxy.ProtocolErrorReasons)
	targetMetrics := metrics.NewPIDTarget(m.Registry)
	signalMetrics := metrics.NewSignals(m.Registry)
	streamMetrics := metrics.NewStreaming(m.Registry)
	idempotentMetrics := metrics.NewIdempotent(m.Registry)
	notificationMetrics := metrics.NewNotifications(m.Registry)
	debugImageMetrics := metrics.NewDebugImages(m.Registry)
	auditMetrics := metrics.NewAudit(m.Registry)
	configMetrics := metrics.NewConfig(m.Registry)
	auditLog, err := audit.Open(cfg.audit.Config, auditMetrics, log.With("feature", "audit"))
	if err != nil {
		return err
	}
	defer auditLog.Close()
	cfg.streaming.Record = cfg.record.RecordConfig
	streams, err := listenStreaming(cfg.streaming, backend, streaming.Deps{
		Metrics: streamMetrics, Audit: auditLog, RecordErrors: auditMetrics, TracerProvider: tr.TracerProvider(),
	}, log)
	if err != nil {
		return err
	}
	pods, err := podSpecs(cfg.notifications, log)
	if err != nil {
		return err
	}
	sh := shim.New(backend, shim.Options{
		Version:          version,
		RuntimeEndpoint:  cfg.runtimeEndpoint,
		ImageEndpoint:    cfg.imageEndpoint,
		Log:              log,
		PIDTargetMode:    cfg.target.pidTargetMode,
		Containerd:       ctrd,
		PIDTargetMetrics: targetMetrics,
		StopSignalMode:   cfg.stopSignal.mode,
		SignalMetrics:    signalMetrics,
		Streaming:        streams,

		DebugImages:       cfg.debugImages.policy,
		DebugImageMetrics: debugImageMetrics,
		Pods:              pods,
		DebugOtherCallers: cfg.debugImages.otherCallers,
		Audit:             auditLog,

		IdempotentMetrics: idempotentMetrics,
	})
	rl.start(watchCtx, ld, cfg.debugImages.policy, auditLog, configMetrics, log)
	// Down until the first connection: an absent series would hide a
	// runtime that never came up from alerts on crishim_runtime_up == 0.
	m.RuntimeConnection("runtime", false)
	go backend.Watch(watchCtx, func(backend string, up bool) {
		m.RuntimeConnection(backend, up)
		if up {
			log.Info("runtime connection ready", "backend", backend)
		} else {
			log.Warn("runtime unreachable; calls answer Unavailable until it returns", "backend", backend)
		}
	})
	intercepted := sh.Intercepted()
	auditUnary, auditStream := sh.CRICallInterceptors()
	srv, err := proxy.NewServer(backend, proxy.ServerOptions{
		MaxMessageSize: cfg.maxMessageSize,
		Intercept:      intercepted,
		Services:       sh.Services(),
		Unary:          []grpc.UnaryServerInterceptor{m.UnaryInterceptor(), auditUnary, proxy.LogUnary(log)},
		Stream:         []grpc.StreamServerInterceptor{m.StreamInterceptor(), auditStream, proxy.LogStream(log)},
		Relay:          proxy.RelayMode(cfg.relay),
		Audited:        shim.CRICallsAudited(auditLog.CRICalls()),
		// Calls the h2 relay passes through reach no interceptor: they
		// are counted into the same series and logged at the same levels.
		Observe:      m,
		Log:          log,
		StatsHandler: tr.ServerHandler(proxy.ServedMethods(intercepted, sh.Services())),
	})
	if err != nil {
		return err
	}

	ln, err := proxy.Listen(cfg.listen)
	if err != nil {
		return err
	}
	defer ln.Close()
	var httpSrv *metrics.HTTPServer
	if cfg.metricsAddress != "" {
		if httpSrv, err = metrics.Listen(cfg.metricsAddress, m, withAudit(readiness(backend.Ready, streams), auditLog), log); err != nil {
			return err
		}
	}

	errc := make(chan error, 3)
	serveStreaming(streams, errc)
	go func() { errc <- srv.Serve(ln) }()
	if httpSrv != nil {
		go func() { errc <- httpSrv.Serve() }()
	}
	notifyCtx, stopNotify := context.WithCancel(ctx)
	defer stopNotify()
	notifyDone, err := startNotifications(notifyCtx, cfg.notifications, backend, sh, notificationMetrics, log)
	if err != nil {
		return err
	}
	log.Info("crishim serving", "version", version, "listen", ln.Path(), "relay", cfg.relay,
		"runtime_endpoint", cfg.runtimeEndpoint, "image_endpoint", cfg.imageEndpoint, "metrics", metricsAddr(httpSrv), "streaming", streamingURL(streams))
	// The socket accepts connections since Listen: a Type=notify unit
	// starts what is ordered after it (the kubelet) only now.
	if err := sdnotify.Notify(sdnotify.Ready); err != nil {
		log.Warn("could not tell systemd crishim is ready", "err", err)
	}
	rl.serving.Store(true)

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", cfg.shutdownTimeout)
	case serveErr = <-errc:
		log.Error("server stopped", "err", serveErr)
	}
	if err := sdnotify.Notify(sdnotify.Stopping); err != nil {
		log.Warn("could not tell systemd crishim is stopping", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	// Notifier runs in flight end with it; a run cut here stays "started" in the
	// Notification and the next crishim records it as interrupted, never runs it again.
	stopNotify()
	if notifyDone != nil {
		select {
		case <-notifyDone:
		case <-sctx.Done():
			log.Warn("Notification controller did not stop within the shutdown timeout")
		}
	}
	streamsDone := shutdownStreaming(sctx, streams, log)
	srv.Shutdown(sctx)
	<-streamsDone
	if httpSrv != nil {
		if err := httpSrv.Shutdown(sctx); err != nil {
			log.Warn("metrics server shutdown", "err", err)
		}
	}
	if err := ln.Close(); err != nil {
		log.Warn("closing socket", "err", err)
	}
	// Last: every span has ended once the servers stopped.
	stopTracing(sctx, tr, log)
	log.Info("stopped")
	return serveErr
}

func metricsAddr(s *metrics.HTTPServer) string {
	if s == nil {
		return "disabled"
	}
	return s.Addr()
}
