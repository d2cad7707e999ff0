package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
)

// recordHandler keeps the records it is given.
type recordHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// TestProxyLogsExpectedDisconnectsAtDebug: the upgrade-aware proxy reports
// a peer that went away as an error; ERROR is for what crishim cannot serve.
func TestProxyLogsExpectedDisconnectsAtDebug(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		level slog.Level
	}{
		{"broken pipe", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, slog.LevelDebug},
		{"broken pipe from splice", syscall.EPIPE, slog.LevelDebug},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, slog.LevelDebug},
		{"closed connection", fmt.Errorf("copy: %w", net.ErrClosed), slog.LevelDebug},
		{"closed pipe", io.ErrClosedPipe, slog.LevelDebug},
		{"anything else", errors.New("tls: bad record MAC"), slog.LevelError},
		{"no route", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, slog.LevelError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &recordHandler{}
			proxyLogger(slog.New(h)).WithValues("k", "v").WithName("proxy").Error(tt.err, "Error proxying data from backend to client")
			if len(h.records) != 1 || h.records[0].Level != tt.level {
				t.Fatalf("records %+v; want one at %v", h.records, tt.level)
			}
		})
	}
}
