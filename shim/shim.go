package shim

import (
	"log/slog"

	"google.golang.org/grpc"

	"github.com/crishim/crishim/allowlist"
	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/proxy"
	"github.com/crishim/crishim/shim/crishimv1"
	"github.com/crishim/crishim/streaming"
)

// Options configures the shim.
type Options struct {
	Version         string // crishim's version, reported by Status
	RuntimeEndpoint string
	ImageEndpoint   string
	Log             *slog.Logger // nil discards

	PIDTargetMode    string             // --pid-target-mode: auto (or empty), native, emulate
	Containerd       *Containerd        // nil: containerd-native paths disabled
	PIDTargetMetrics *metrics.PIDTarget // nil counts nothing

	DebugImages       *allowlist.Policy    // nil: debug containers may run any image
	DebugImageMetrics *metrics.DebugImages // nil counts nothing
	// Pods tells the kubelet's ephemeral containers from its regular ones
	// (podspec.Source); nil: only TARGET containers are debug containers.
	Pods ContainerKinds
	// DebugOtherCallers makes every container a caller other than the
	// kubelet creates a debug container (--debug-image-allowlist-other-callers).
	DebugOtherCallers bool

	StopSignalMode string           // --stop-signal-mode: auto (or empty), native, emulate
	SignalMetrics  *metrics.Signals // nil counts nothing

	Streaming *streaming.Server // nil: Exec, Attach, PortForward pass through with the runtime's URLs

	IdempotentMetrics *metrics.Idempotent // nil counts nothing

	Audit *audit.Log // nil audits nothing
}

// Shim implements the intercepted CRI calls and the crishim.v1 API on top of
// the backend connections.
type Shim struct {
	backend   *proxy.Backend
	opts      Options
	target    *pidTarget
	ephemeral *ephemeralContainers
	signals   *signalling
}

// New returns a shim forwarding to backend.
func New(backend *proxy.Backend, opts Options) *Shim {
	if opts.ImageEndpoint == "" {
		opts.ImageEndpoint = opts.RuntimeEndpoint
	}
	s := &Shim{backend: backend, opts: opts}
	s.target = s.newPIDTarget()
	s.ephemeral = &ephemeralContainers{
		images:  s.target.images,
		kinds:   opts.Pods,
		others:  opts.DebugOtherCallers,
		audit:   opts.Audit,
		metrics: opts.DebugImageMetrics,
		log:     s.logger("debug-images"),
	}
	s.signals = s.newSignalling()
	return s
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
	methods = append(methods, s.containerMethods()...)
	methods = append(methods, s.streamMethods()...)
	methods = append(methods, s.execSyncMethods()...)
	return methods
}

// Services are crishim's own gRPC services, served on the CRI socket.
func (s *Shim) Services() []proxy.Service {
	return []proxy.Service{{Desc: &crishimv1.Crishim_ServiceDesc, Impl: s.API()}}
}

// api implements crishim.v1.
type api struct {
	crishimv1.UnimplementedCrishimServer // crishim's own API only: never CRI
	shim                                 *Shim
}

// API is the crishim.v1 service itself, for in-process callers (the Notification
// controller runs notifiers through the same Notify as crishimctl).
func (s *Shim) API() crishimv1.CrishimServer { return &api{shim: s} }

// ServiceDescs lists crishim's own services, for callers that need their
// method names (metrics labels).
func ServiceDescs() []grpc.ServiceDesc {
	return []grpc.ServiceDesc{crishimv1.Crishim_ServiceDesc}
}
