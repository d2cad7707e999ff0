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
	// ContainerStatus is the kubelet's most frequent call: it stays on the
	// raw relay, with its answer amended; when the runtime is told to handle
	// stop_signal itself, it and StopContainer are not touched at all.
	stopIntercepted := s.signals.configured != StopSignalNative
	if stopIntercepted {
		methods = append(methods,
			proxy.Unary(stopContainerMethod, s.stopIdempotent(s.signals.stop)),
			proxy.RewriteResponse(containerStatusMethod, s.signals.rewriteStatus))
	}
	return append(methods, s.idempotentMethods(stopIntercepted)...)
}

// createContainer records the stop signal (when crishim emulates it), then
// hands over to TARGET, which forwards to the runtime.
func (s *Shim) createContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	created, err := s.signals.create(ctx, req)
	if err != nil {
		return nil, err
	}
	resp, err := s.target.create(ctx, req)
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
