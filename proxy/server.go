package proxy

import (
	"context"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/crishim/crishim/caller"
)

// ServerOptions configures the kubelet-facing gRPC server.
type ServerOptions struct {
	// MaxMessageSize bounds messages both ways; 0 means DefaultMaxMessageSize.
	MaxMessageSize int
	// Intercept lists the methods crishim decodes and handles itself.
	Intercept []Method
	// Services are crishim's own gRPC services (crishim.v1), served on the
	// same socket.
	Services []Service
	// Unary and Stream interceptors wrap every call the gRPC server runs:
	// intercepted calls, crishim.v1, and the audited calls of callers other
	// than the kubelet (see Audited), those as streams. Calls the relay
	// passes through never reach them; Observe and Log see those. They are
	// composed here, in this order, and nowhere else.
	Unary  []grpc.UnaryServerInterceptor
	Stream []grpc.StreamServerInterceptor
	// Observe and Log see the calls the relay passes through, which no
	// interceptor sees.
	Observe CallObserver
	Log     *slog.Logger
	// StatsHandler sees the calls the gRPC server runs (tracing); nil
	// adds nothing. Calls the relay passes through never reach it.
	StatsHandler stats.Handler
	// Audited says which methods, called by anything but the kubelet,
	// crishim's gRPC server must see to audit them (the caller, the IDs of
	// the request and answer, the code). The relay sends those calls there
	// instead of relaying them, and the server relays them on (forward.go);
	// the kubelet's calls never take that detour. Nil: none.
	Audited func(fullMethod string) bool

	// Tests shorten the relay's GOAWAY bound; 0 means goAwayTimeout (the
	// timer tests run in a bubble, with the bounds as shipped).
	goAwayTimeout time.Duration
	// identify replaces identifyPeer: tests play the kubelet.
	identify func(net.Conn) *caller.Process
	// Tests set the clock of the protocol error warnings' rate limit.
	warnClock func() time.Time
}

// Service is a locally implemented gRPC service.
type Service struct {
	Desc *grpc.ServiceDesc
	Impl any
}

// Server is the kubelet-facing server: the relay, and behind it crishim's
// gRPC server.
type Server struct {
	relay *relay
}

// NewServer builds the server: intercepted methods and crishim's services
// are registered with its gRPC server, everything else is relayed to
// backend.
func NewServer(backend *Backend, opts ServerOptions) (*Server, error) {
	size := opts.MaxMessageSize
	if size <= 0 {
		size = DefaultMaxMessageSize
	}
	// The relay amends these answers, and so does the gRPC server for
	// the audited calls it relays.
	rw, nf := rewrites(opts.Intercept), notFoundHooks(opts.Intercept)
	creds := &callerCreds{locals: newLocalCallers()}
	sopts := []grpc.ServerOption{
		grpc.Creds(creds),
		grpc.ForceServerCodecV2(newCodec()),
		grpc.UnknownServiceHandler(backend.relayHandler(rw, nf)),
		grpc.MaxRecvMsgSize(size),
		grpc.MaxSendMsgSize(size),
		// Advertised, and a larger list refused, as the relay does.
		grpc.MaxHeaderListSize(maxHeaderListSize),
		grpc.ChainUnaryInterceptor(opts.Unary...),
		grpc.ChainStreamInterceptor(opts.Stream...),
	}
	if opts.StatsHandler != nil {
		sopts = append(sopts, grpc.StatsHandler(opts.StatsHandler))
	}
	gs := grpc.NewServer(sopts...)
	descs, err := serviceDescs(opts.Intercept)
	if err != nil {
		return nil, err
	}
	for _, sd := range descs {
		gs.RegisterService(sd, nil)
	}
	for _, svc := range opts.Services {
		gs.RegisterService(svc.Desc, svc.Impl)
	}
	return &Server{relay: newRelay(backend, gs, opts, rw, nf, size, creds.locals)}, nil
}

// ServedMethods lists the full names of the methods the server handles
// itself: the intercepted ones (not those only rewritten on their way
// back) and crishim's own services'.
func ServedMethods(intercept []Method, services []Service) []string {
	var names []string
	for _, m := range intercept {
		if m.handler != nil {
			names = append(names, m.FullMethod)
		}
	}
	for _, svc := range services {
		names = append(names, MethodNames(*svc.Desc)...)
	}
	return names
}

// Serve accepts connections on l until Shutdown.
func (s *Server) Serve(l net.Listener) error {
	return s.relay.serve(l)
}

// Shutdown stops accepting calls and waits for in-flight ones to finish
// until ctx is done; then it ends whatever is left (long-lived streams such
// as GetContainerEvents never finish by themselves).
func (s *Server) Shutdown(ctx context.Context) {
	s.relay.shutdown(ctx)
}
