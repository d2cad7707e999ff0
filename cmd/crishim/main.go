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

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/cmd/crishim/internal/hup"
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
// the socket. Each step lives in the file named for its concern: runtime.go,
// metrics.go, streaming.go, shim.go, reload.go, server.go, notifications.go
// and shutdown.go.
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
	defer flushTracing(cfg.shutdownTimeout, tr, log)

	rt, err := dialRuntime(cfg, tr)
	if err != nil {
		return err
	}
	defer rt.close()
	// The reloader and the runtime watch end with run.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	m := newMetrics()
	auditLog, err := audit.Open(cfg.audit.Config, m.audit, log.With("feature", "audit"))
	if err != nil {
		return err
	}
	defer auditLog.Close()

	cfg.streaming.Record = cfg.record.RecordConfig
	s := &servers{}
	if s.streams, err = listenStreaming(cfg.streaming, rt.backend, streaming.Deps{
		Metrics: m.streaming, Audit: auditLog, RecordErrors: m.audit, TracerProvider: tr.TracerProvider(),
	}, log); err != nil {
		return err
	}
	sh, err := newShim(cfg, rt, s.streams, auditLog, m, log)
	if err != nil {
		return err
	}
	rl.start(watchCtx, ld, cfg.debugImages.policy, auditLog, m.config, log)
	watchRuntime(watchCtx, rt.backend, m.Metrics, log)

	if s.cri, s.socket, err = listenCRI(cfg, rt.backend, sh, auditLog, m.Metrics, tr, log); err != nil {
		return err
	}
	defer s.socket.Close()
	if s.metrics, err = listenMetrics(cfg.metricsAddress, m.Metrics, withAudit(readiness(rt.backend.Ready, s.streams), auditLog), log); err != nil {
		return err
	}
	errc := s.serve()
	if s.stopNotify, s.notifyDone, err = startNotifications(ctx, cfg.notifications, rt.backend, sh, m.notifications, log); err != nil {
		return err
	}
	announceServing(cfg, s, log)
	rl.serving.Store(true)

	serveErr := waitForStop(ctx, errc, cfg.shutdownTimeout, log)
	shutdown(cfg.shutdownTimeout, s, tr, log)
	return serveErr
}
