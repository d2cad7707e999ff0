package shim

import (
	"context"

	"google.golang.org/grpc/metadata"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/proxy"
)

// CreateContainer, StartContainer, StopContainer and ContainerStatus are
// intercepted (ContainerStatus: rewritten) once, here; each feature that adds to them hooks into these
// handlers (see Intercepted).
const (
	createContainerMethod = "/runtime.v1.RuntimeService/CreateContainer"
	startContainerMethod  = "/runtime.v1.RuntimeService/StartContainer"
	stopContainerMethod   = "/runtime.v1.RuntimeService/StopContainer"
	containerStatusMethod = "/runtime.v1.RuntimeService/ContainerStatus"
)

func (s *Shim) containerMethods() []proxy.Method {
	methods := []proxy.Method{
		proxy.Unary(createContainerMethod, s.createContainer),
		proxy.Unary(startContainerMethod, s.target.start),
	}
	// StopContainer is intercepted in every mode: a container created while
	// crishim emulated its stop signal carries the annotation for life, and
	// a crishim restarted with --stop-signal-mode native must still finish
	// that stop its own way; relayed, a runtime that honours stop_signal
	// would deliver the signal a second time. Its cost is one decode and one
	// lookup per stop, not per status poll.
	methods = append(methods, proxy.Unary(stopContainerMethod, s.stopIdempotent(s.signals.stop)))
	// ContainerStatus is the kubelet's most frequent call: it stays on the
	// raw relay, with its answer amended unless the runtime is told to
	// report stop_signal itself.
	if s.signals.configured != StopSignalNative {
		methods = append(methods, proxy.RewriteResponse(containerStatusMethod, s.signals.rewriteStatus))
	}
	return append(methods, s.idempotentMethods()...)
}

// createContainer records the stop signal (when crishim emulates it), judges
// an ephemeral container without TARGET as a debug container, then hands
// over to TARGET, which forwards to the runtime.
func (s *Shim) createContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	created, err := s.signals.create(ctx, req)
	if err != nil {
		return nil, err
	}
	resp, err := s.ephemeral.create(ctx, req, s.target.create)
	created(resp, err)
	return resp, err
}

// runtimeClient is the typed CRI client intercepted calls forward through.
func (s *Shim) runtimeClient() runtimeapi.RuntimeServiceClient {
	return runtimeapi.NewRuntimeServiceClient(s.backend.RuntimeConn())
}

// toRuntime carries the caller's metadata (trace context) to the runtime, as
// the raw relay does for pass-through calls; the deadline travels with ctx.
func toRuntime(ctx context.Context) context.Context {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		return metadata.NewOutgoingContext(ctx, md)
	}
	return ctx
}
