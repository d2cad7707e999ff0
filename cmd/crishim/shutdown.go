package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/crishim/crishim/cmd/crishim/internal/sdnotify"
	"github.com/crishim/crishim/tracing"
)

// waitForStop waits until ctx is canceled (SIGTERM/SIGINT) or a server
// stops by itself, tells systemd crishim is stopping, and returns that
// server's error (nil on a signal).
func waitForStop(ctx context.Context, errc <-chan error, timeout time.Duration, log *slog.Logger) error {
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "timeout", timeout)
	case serveErr = <-errc:
		log.Error("server stopped", "err", serveErr)
	}
	if err := sdnotify.Notify(sdnotify.Stopping); err != nil {
		log.Warn("could not tell systemd crishim is stopping", "err", err)
	}
	return serveErr
}

// shutdown stops what serves, within timeout, in this order: the
// Notification controller; the CRI and streaming servers drain side by side
// (stop accepting, tell clients to go away, let in-flight calls and streams
// finish); the metrics server; the socket is removed, unless systemd passed
// it (it keeps listening, and queues the calls for the next crishim); last,
// the spans are exported.
func shutdown(timeout time.Duration, s *servers, tr *tracing.Tracing, log *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Notifier runs in flight end with it; a run cut here stays "started" in the
	// Notification and the next crishim records it as interrupted, never runs it again.
	s.stopNotify()
	if s.notifyDone != nil {
		select {
		case <-s.notifyDone:
		case <-sctx.Done():
			log.Warn("Notification controller did not stop within the shutdown timeout")
		}
	}
	streamsDone := shutdownStreaming(sctx, s.streams, log)
	s.cri.Shutdown(sctx)
	<-streamsDone
	if s.metrics != nil {
		if err := s.metrics.Shutdown(sctx); err != nil {
			log.Warn("metrics server shutdown", "err", err)
		}
	}
	if err := s.socket.Close(); err != nil {
		log.Warn("closing socket", "err", err)
	}
	// Last: every span has ended once the servers stopped.
	stopTracing(sctx, tr, log)
	log.Info("stopped")
}

// flushTracing is stopTracing within a shutdown timeout of its own.
func flushTracing(timeout time.Duration, tr *tracing.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stopTracing(ctx, tr, log)
}
