package shim

import (
	"google.golang.org/grpc"

	"github.com/crishim/crishim/proxy"
	"github.com/crishim/crishim/shim/crishimv1"
)

// Options configures the shim.
type Options struct {
	Version         string // crishim's version, reported by Status
	RuntimeEndpoint string
	ImageEndpoint   string
}

// Shim implements the intercepted CRI calls and the crishim.v1 API on top of
// the backend connections.
type Shim struct {
	backend *proxy.Backend
	opts    Options
}

// New returns a shim forwarding to backend.
func New(backend *proxy.Backend, opts Options) *Shim {
	if opts.ImageEndpoint == "" {
		opts.ImageEndpoint = opts.RuntimeEndpoint
	}
	return &Shim{backend: backend, opts: opts}
}

// Intercepted is the one list of CRI methods crishim decodes and handles
// itself; every other method is relayed as raw bytes. Features add their
// methods here.
//
// A CRI method can be registered once only: a feature that needs a method
// another feature already intercepts hooks into that method's handler
// instead of adding a second entry.
func (s *Shim) Intercepted() []proxy.Method {
	var methods []proxy.Method
	return methods
}

// Services are crishim's own gRPC services, served on the CRI socket.
func (s *Shim) Services() []proxy.Service {
	return []proxy.Service{{Desc: &crishimv1.Crishim_ServiceDesc, Impl: &api{shim: s}}}
}

// ServiceDescs lists crishim's own services, for callers that need their
// method names (metrics labels).
func ServiceDescs() []grpc.ServiceDesc {
	return []grpc.ServiceDesc{crishimv1.Crishim_ServiceDesc}
}
