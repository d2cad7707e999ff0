package streaming

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/metrics"
)

// Runtime is where a stored request goes when its token is presented: the
// CRI calls themselves, on the backend connection, answering with the
// runtime's own URL. runtimeapi.RuntimeServiceClient is one.
type Runtime interface {
	Exec(ctx context.Context, in *runtimeapi.ExecRequest, opts ...grpc.CallOption) (*runtimeapi.ExecResponse, error)
	Attach(ctx context.Context, in *runtimeapi.AttachRequest, opts ...grpc.CallOption) (*runtimeapi.AttachResponse, error)
	PortForward(ctx context.Context, in *runtimeapi.PortForwardRequest, opts ...grpc.CallOption) (*runtimeapi.PortForwardResponse, error)
}

// Deps is what the server works with, as opposed to Config, how it is
// set: the runtime it asks for URLs and where it reports. They come from
// crishim's wiring, never from an operator (as k8s.io/kubelet's streaming
// server takes its Runtime beside its Config).
type Deps struct {
	// Runtime answers a token's request with the runtime's own URL.
	// Required.
	Runtime Runtime
	// Metrics counts tokens and sessions. Required.
	Metrics *metrics.Streaming
	// Log receives the server's and its sessions' lines. Required.
	Log *slog.Logger
	// Audit records each session's start and end (--audit-log); nil
	// records nothing.
	Audit *audit.Log
	// RecordErrors counts the recordings that failed
	// (crishim_record_errors_total); nil counts nothing.
	RecordErrors audit.RecordErrors
	// TracerProvider traces each session (--tracing-endpoint); nil traces
	// nothing.
	TracerProvider trace.TracerProvider

	// idleTimeout replaces defaultIdleTimeout (tests).
	idleTimeout time.Duration
	// streamed, when set, is called as a WebSocket session's runtime
	// side ended, before its status is written (tests).
	streamed func()
}

// check names a required dependency missing: the first token or session
// would panic without it.
func (d Deps) check() error {
	var missing string
	switch {
	case d.Runtime == nil:
		missing = "Runtime"
	case d.Metrics == nil:
		missing = "Metrics"
	case d.Log == nil:
		missing = "Log"
	default:
		return nil
	}
	return fmt.Errorf("streaming server: Deps.%s is required", missing)
}

// defaultIdleTimeout closes keep-alive connections with no request in
// flight. Stream clients make one request per connection and upgrade it,
// so a connection idle this long is not going to be used.
const defaultIdleTimeout = 30 * time.Second

// maxHeaderBytes bounds a request's headers. Stream requests carry a token
// path and the upgrade headers an API server's proxy forwards, a few KiB at
// most (net/http's default would be 1 MiB).
const maxHeaderBytes = 64 << 10

// Server is crishim's streaming server: it issues tokens for the shim and
// serves them over HTTP.
type Server struct {
	cfg Config

	runtime      Runtime
	metrics      *metrics.Streaming
	log          *slog.Logger
	audit        *audit.Log // nil: sessions are not audited
	recordErrors audit.RecordErrors
	tracer       trace.Tracer // nil: sessions are not traced
	streamed     func()       // Deps.streamed

	cache   *cache
	ln      net.Listener
	base    string // scheme://host:port of every URL issued
	http    *http.Server
	serving atomic.Bool
	// recordBudget bounds the recording directory (nil: no bound).
	recordBudget *audit.RecordBudget

	mu      sync.Mutex
	closing bool
	live    map[*session]struct{}
	// webSockets counts the WebSocket sessions crishim serves itself,
	// at most cfg.MaxWebSocketSessions.
	webSockets int
	sessions   sync.WaitGroup
}

// Listen binds cfg.Address now, so a taken port or a refused exposure is a
// startup error, and returns a server that serves once Serve is called.
func Listen(cfg Config, d Deps) (*Server, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var tlsCfg *tls.Config
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("streaming TLS certificate: %w", err)
		}
		tlsCfg = &tls.Config{
			Certificates: []tls.Certificate{cert},
			MinVersion:   tls.VersionTLS12,
			// Streams are HTTP/1.1 upgrades; a client that negotiated h2
			// could not upgrade at all.
			NextProtos: []string{"http/1.1"},
		}
	}
	ln, err := net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("streaming address %s: %w", cfg.Address, err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	host, err := advertisedHost(addr)
	if err == nil {
		// A host name is judged by what it bound to.
		err = cfg.checkExposure(addr.IP)
	}
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
		ln = tls.NewListener(ln, tlsCfg)
	}
	if d.RecordErrors == nil {
		d.RecordErrors = noRecordErrors{}
	}
	s := &Server{
		cfg:          cfg,
		runtime:      d.Runtime,
		metrics:      d.Metrics,
		log:          d.Log,
		audit:        d.Audit,
		recordErrors: d.RecordErrors,
		streamed:     d.streamed,
		ln:           ln,
		base:         scheme + "://" + host,
		live:         map[*session]struct{}{},

		recordBudget: audit.NewRecordBudget(cfg.Record.Dir, cfg.Record.MaxTotalBytes),
	}
	if d.TracerProvider != nil {
		s.tracer = d.TracerProvider.Tracer(tracerName)
	}
	s.cache = newCache(cfg.TokenTTL, cfg.MaxTokens, time.Now, rand.Reader, func(k Kind) { d.Metrics.TokenExpired(string(k)) })
	mux := http.NewServeMux()
	for _, k := range Kinds {
		// GET carries WebSocket, POST carries SPDY, as the runtimes route
		// them; the mux answers 405 with Allow for any other method before
		// the token is looked at.
		mux.Handle("GET /"+string(k)+"/{token}", s.handler(k))
		mux.Handle("POST /"+string(k)+"/{token}", s.handler(k))
	}
	idle := d.idleTimeout
	if idle == 0 {
		idle = defaultIdleTimeout
	}
	s.http = &http.Server{
		Handler: mux,
		// No ReadTimeout or WriteTimeout: their deadlines would stay on
		// hijacked connections and cut long sessions. IdleTimeout only
		// applies between requests, never to a hijacked stream; without
		// it, idle keep-alive connections from anyone who can reach the
		// port would use up crishim's file descriptors.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       idle,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(d.Log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// noRecordErrors counts nothing, for servers made without metrics (tests).
type noRecordErrors struct{}

func (noRecordErrors) RecordError() {}

// pending is what a token stands for.
type pending struct {
	req    any
	who    audit.Event
	record audit.RecordMode // the pod's annotation
	// parent is the span of the call that issued the token, if traced.
	parent trace.SpanContext
}

// Addr is the bound address (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// BaseURL is the scheme and host of the URLs the server issues.
func (s *Server) BaseURL() string { return s.base }

// Issue keeps req behind a fresh token and returns the URL that serves it.
// req is the decoded CRI request (*runtimeapi.ExecRequest for Exec, and so
// on); it is sent to the runtime as it is when the URL is used.
func (s *Server) Issue(kind Kind, req any) (string, error) {
	return s.IssueFor(context.Background(), kind, req, audit.Event{})
}

// IssueFor is Issue for a request whose pod and container the caller
// knows: who fills the session's audit events. The session's span, if
// traced, is a child of the span in ctx.
func (s *Server) IssueFor(ctx context.Context, kind Kind, req any, who audit.Event) (string, error) {
	return s.IssueRecorded(ctx, kind, req, who, "")
}

// IssueRecorded is IssueFor for a session whose pod asks for recording
// (the crishim.io/record-sessions annotation) more than the node does.
func (s *Server) IssueRecorded(ctx context.Context, kind Kind, req any, who audit.Event, pod audit.RecordMode) (string, error) {
	token, err := s.cache.insert(kind, pending{req: req, who: who, record: pod, parent: trace.SpanContextFromContext(ctx)})
	if err != nil {
		if status.Code(err) == codes.ResourceExhausted {
			s.metrics.TokenRejected(string(kind), "full")
		}
		return "", err
	}
	s.metrics.TokenIssued(string(kind))
	return s.base + "/" + string(kind) + "/" + token, nil
}

// Serve serves until Shutdown; it owns the goroutine sweeping expired
// tokens.
func (s *Server) Serve() error {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.sweepEvery(ctx, max(s.cfg.TokenTTL/2, time.Second))
	}()
	defer func() {
		stop()
		wg.Wait()
	}()
	s.serving.Store(true)
	defer s.serving.Store(false)
	if err := s.http.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("streaming server: %w", err)
	}
	return nil
}

// sweepEvery drops expired tokens so that unused ones do not pile up until
// the next issue; a token presented late is refused whether swept or not.
func (s *Server) sweepEvery(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n := s.cache.sweep(); n > 0 {
				s.log.Debug("stream tokens expired", "count", n)
			}
		}
	}
}

// Ready reports whether the server accepts connections, for /readyz.
func (s *Server) Ready(context.Context) error {
	if !s.serving.Load() {
		return errors.New("streaming server not serving")
	}
	return nil
}

// Shutdown stops accepting, lets open streams run until ctx is done, then
// ends what is left: an exec or attach whose client can be told is told
// why (endAtShutdown), within tellWait, and the rest is cut, both sides.
// http.Server.Shutdown alone would not do: it forgets hijacked
// connections, which is every stream.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	err := s.http.Shutdown(ctx)
	done := make(chan struct{})
	go func() {
		s.sessions.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.mu.Lock()
		n := len(s.live)
		for sess := range s.live {
			sess.endAtShutdown()
		}
		s.mu.Unlock()
		s.log.Info("streaming server: cutting streams still open at the shutdown timeout", "count", n)
		err = errors.Join(err, s.http.Close())
		t := time.NewTimer(tellWait)
		select {
		case <-done:
		case <-t.C:
			s.mu.Lock()
			for sess := range s.live {
				sess.cut()
			}
			s.mu.Unlock()
			<-done
		}
		t.Stop()
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("streaming server shutdown: %w", err)
	}
	return nil
}
