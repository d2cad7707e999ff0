package shim

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/caller"
	"github.com/crishim/crishim/shim/crishimv1"
)

// Signal sends a signal to a container's init process, once: the operator's
// way to a config reload (SIGHUP) in an image without a kill binary.
func (a *api) Signal(ctx context.Context, req *crishimv1.SignalRequest) (resp *crishimv1.SignalResponse, err error) {
	// The container is found before the started event, so that the event
	// names it by its full ID whatever prefix the client typed.
	c, sig, findErr := a.signalTarget(ctx, req)
	ev := audit.Event{Kind: audit.KindSignal, ContainerID: req.GetContainerId(), Signal: req.GetSignal(), Caller: caller.FromContext(ctx)}
	if c != nil {
		ev.ContainerID, ev.PodSandboxID = c.GetId(), c.GetPodSandboxId()
	}
	sess := a.shim.opts.Audit.Start(ev)
	if err := sess.Refused(); err != nil {
		return nil, auditRefused(err)
	}
	defer func() {
		sess.End(func(ev *audit.Event) {
			auditEnd(err)(ev)
			if resp != nil {
				ev.Signal = resp.GetSignal()
			}
		})
	}()
	if findErr != nil {
		return nil, findErr
	}
	g := a.shim.signals
	via, err := g.deliver(ctx, c, sig)
	g.record("api", c, sig, via, err)
	if err != nil {
		return nil, err
	}
	return &crishimv1.SignalResponse{
		ContainerId:  c.GetId(),
		PodSandboxId: c.GetPodSandboxId(),
		Signal:       sig.name,
		Number:       int32(sig.num),
		Via:          via,
	}, nil
}

// signalTarget checks a Signal request and finds its container: the
// container and the signal, or the error to answer (counted).
func (a *api) signalTarget(ctx context.Context, req *crishimv1.SignalRequest) (*runtimeapi.Container, signal, error) {
	g := a.shim.signals
	id := strings.TrimSpace(req.GetContainerId())
	if id == "" {
		return nil, signal{}, status.Error(codes.InvalidArgument, "container_id: empty; name the container to signal")
	}
	sig, err := parseSignal(req.GetSignal())
	if err != nil {
		g.metrics.Delivery("api", "invalid", viaNone, codes.InvalidArgument.String())
		return nil, signal{}, status.Errorf(codes.InvalidArgument, "signal: %v", err)
	}
	c, err := findContainer(ctx, g.rs, id)
	if err != nil {
		g.metrics.Delivery("api", sig.name, viaNone, status.Code(err).String())
		return nil, sig, err
	}
	if c == nil {
		g.metrics.Delivery("api", sig.name, viaNone, codes.NotFound.String())
		return nil, sig, status.Errorf(codes.NotFound, "container_id: container %q not found", id)
	}
	return c, sig, nil
}
