package streaming

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"

	"github.com/go-logr/logr"
)

// proxyLogger is the logger the upgrade-aware proxy (apimachinery) finds in
// its request's context. The proxy reports the end of every copy that did
// not end in EOF as an error, and a client or runtime that closes its end
// mid-stream (Ctrl-C, a finished command, a dropped port-forward) ends one
// that way: ERROR is for what crishim cannot serve, so those are debug.
func proxyLogger(log *slog.Logger) logr.Logger {
	return logr.New(disconnectSink{logr.FromSlogHandler(log.Handler()).GetSink()})
}

// debugV is slog's debug level as a logr verbosity (logr V(n) is slog
// level -n).
const debugV = -int(slog.LevelDebug)

type disconnectSink struct{ logr.LogSink }

func (s disconnectSink) Error(err error, msg string, kv ...any) {
	if !expectedDisconnect(err) {
		s.LogSink.Error(err, msg, kv...)
		return
	}
	if s.LogSink.Enabled(debugV) {
		s.LogSink.Info(debugV, msg, append(kv, "err", err)...)
	}
}

func (s disconnectSink) WithValues(kv ...any) logr.LogSink {
	return disconnectSink{s.LogSink.WithValues(kv...)}
}

func (s disconnectSink) WithName(name string) logr.LogSink {
	return disconnectSink{s.LogSink.WithName(name)}
}

// expectedDisconnect says whether err is a peer, or crishim's own cut,
// closing a stream's connection: normal ends of a stream.
func expectedDisconnect(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe)
}
