package proxy

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
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
	// Unary and Stream interceptors wrap every call, intercepted and
	// relayed alike (relayed calls see only the stream interceptors). They
	// are composed here, in this order, and nowhere else.
	Unary  []grpc.UnaryServerInterceptor
	Stream []grpc.StreamServerInterceptor
}

// Service is a locally implemented gRPC service.
type Service struct {
	Desc *grpc.ServiceDesc
	Impl any
}

// Server is the kubelet-facing gRPC server.
type Server struct {
	grpc *grpc.Server
}

// NewServer builds the server: intercepted methods and crishim's services
// are registered, everything else goes to the raw relay to backend.
func NewServer(backend *Backend, opts ServerOptions) (*Server, error) {
	size := opts.MaxMessageSize
	if size <= 0 {
		size = DefaultMaxMessageSize
	}
	gs := grpc.NewServer(
		grpc.ForceServerCodecV2(newCodec()),
		grpc.UnknownServiceHandler(backend.forward),
		grpc.MaxRecvMsgSize(size),
		grpc.MaxSendMsgSize(size),
		grpc.ChainUnaryInterceptor(opts.Unary...),
		grpc.ChainStreamInterceptor(opts.Stream...),
	)
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
	return &Server{grpc: gs}, nil
}

// Serve accepts connections on l until Shutdown.
func (s *Server) Serve(l net.Listener) error {
	if err := s.grpc.Serve(l); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// Shutdown stops accepting calls and waits for in-flight ones to finish
// until ctx is done; then it ends whatever is left (long-lived streams such
// as GetContainerEvents never finish by themselves).
func (s *Server) Shutdown(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
		<-done
	}
}
