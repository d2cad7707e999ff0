package shim

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/shim/crishimv1"
)

// Status reports crishim and the runtime behind it. A runtime that does not
// answer is part of the report, not an error: status is what an operator
// runs when something is wrong.
func (a *api) Status(ctx context.Context, _ *crishimv1.StatusRequest) (*crishimv1.StatusResponse, error) {
	s := a.shim
	resp := &crishimv1.StatusResponse{
		Version:         s.opts.Version,
		RuntimeEndpoint: s.opts.RuntimeEndpoint,
		ImageEndpoint:   s.opts.ImageEndpoint,
		Modes:           s.modes(ctx),
	}
	v, err := runtimeapi.NewRuntimeServiceClient(s.backend.RuntimeConn()).Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		resp.RuntimeError = err.Error()
		return resp, nil
	}
	resp.RuntimeReady = true
	resp.RuntimeName = v.GetRuntimeName()
	resp.RuntimeVersion = v.GetRuntimeVersion()
	resp.RuntimeApiVersion = v.GetRuntimeApiVersion()
	return resp, nil
}

// modes lists the features that can be native or emulated; each feature
// adds itself here when it lands.
func (s *Shim) modes(ctx context.Context) []*crishimv1.Mode {
	return []*crishimv1.Mode{s.target.statusMode(ctx), s.signals.statusMode(ctx)}
}
