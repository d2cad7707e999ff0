package shim

import (
	"context"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/proxy"
)

// The CRI makes stopping and removing idempotent: an ID the runtime does
// not know is already stopped and removed, and the call must succeed (the
// conformance suite's Idempotence specs check it). containerd 1.6 answers
// NotFound to some of them; crishim answers OK instead.
const (
	stopPodSandboxMethod   = "/runtime.v1.RuntimeService/StopPodSandbox"
	removeContainerMethod  = "/runtime.v1.RuntimeService/RemoveContainer"
	removePodSandboxMethod = "/runtime.v1.RuntimeService/RemovePodSandbox"
)

// idempotentMethods are the relayed ones: only the status of the runtime's
// answer is looked at, so their successful answers stay on the fast path.
// StopContainer, which crishim intercepts (stop signals), has
// stopIdempotent wrapped around its handler instead.
func (s *Shim) idempotentMethods() []proxy.Method {
	log := s.logger("idempotence")
	names := []string{stopPodSandboxMethod, removeContainerMethod, removePodSandboxMethod}
	methods := make([]proxy.Method, 0, len(names))
	for _, name := range names {
		methods = append(methods, proxy.NotFoundIsOK(name, func(msg string) { s.notFoundIsOK(log, name, msg) }))
	}
	return methods
}

// stopIdempotent is the intercepted StopContainer's version of the same
// rule.
func (s *Shim) stopIdempotent(stop func(context.Context, *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error)) func(context.Context, *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	log := s.logger("idempotence")
	return func(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
		resp, err := stop(ctx, req)
		if st, ok := status.FromError(err); ok && st.Code() == codes.NotFound {
			s.notFoundIsOK(log, stopContainerMethod, st.Message())
			return &runtimeapi.StopContainerResponse{}, nil
		}
		return resp, err
	}
}

// notFoundIsOK logs and counts one NotFound answered OK. It runs on the
// relay's path: a debug record and a counter, nothing that blocks.
func (s *Shim) notFoundIsOK(log *slog.Logger, method, msg string) {
	s.opts.IdempotentMetrics.NotFound(method)
	log.Debug("the runtime does not know the ID; answered OK, as stopping and removing are idempotent", "method", method, "runtime_err", msg)
}
