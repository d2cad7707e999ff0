package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readyTimeout bounds one /readyz probe of the runtime; a probe that hangs
// would make the prober's own timeout the answer.
const readyTimeout = 2 * time.Second

// HTTPServer serves /metrics, /healthz and /readyz.
type HTTPServer struct {
	srv *http.Server
	ln  net.Listener
}

// Listen binds addr now, so a taken port is a startup error, and returns a
// server whose /readyz answers with ready's verdict.
func Listen(addr string, m *Metrics, ready func(context.Context) error, log *slog.Logger) (*HTTPServer, error) {
	return listen(addr, m, ready, log, defaultIdleTimeout)
}

// maxHeaderBytes bounds a request's headers: scrapers and probes send a
// few hundred bytes (net/http's default would be 1 MiB).
const maxHeaderBytes = 16 << 10

// defaultIdleTimeout is longer than the usual scrape intervals (up to a
// minute), so that a Prometheus keeps its one connection between scrapes.
const defaultIdleTimeout = 2 * time.Minute

func listen(addr string, m *Metrics, ready func(context.Context) error, log *slog.Logger, idle time.Duration) (*HTTPServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics address %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := ready(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return &HTTPServer{
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			// Anyone on the node can connect; idle connections held open
			// would use up crishim's file descriptors, which the CRI
			// socket needs too.
			IdleTimeout:    idle,
			MaxHeaderBytes: maxHeaderBytes,
		},
		ln: ln,
	}, nil
}

// Addr is the bound address (useful with port 0).
func (s *HTTPServer) Addr() string { return s.ln.Addr().String() }

// Serve serves until Shutdown.
func (s *HTTPServer) Serve() error {
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics server: %w", err)
	}
	return nil
}

// Shutdown stops the server, waiting for open requests until ctx is done.
func (s *HTTPServer) Shutdown(ctx context.Context) error {
	if err := s.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("metrics server shutdown: %w", err)
	}
	return nil
}
