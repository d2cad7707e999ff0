package shim

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/caller"
	"github.com/crishim/crishim/shim/crishimv1"
)

// Signal sends a signal to a container's init process, once: the operator's
// way to a config reload (SIGHUP) in an image without a kill binary.
func (a *api) Signal(ctx context.Context, req *crishimv1.SignalRequest) (resp *crishimv1.SignalResponse, err error) {
	sess := a.shim.opts.Audit.Start(audit.Event{Kind: audit.KindSignal, ContainerID: req.GetContainerId(), Signal: req.GetSignal(), Caller: caller.FromContext(ctx)})
	if err := sess.Refused(); err != nil {
		return nil, auditRefused(err)
	}
	defer func() {
		sess.End(func(ev *audit.Event) {
			auditEnd(err)(ev)
			if resp != nil {
				ev.ContainerID, ev.PodSandboxID, ev.Signal = resp.GetContainerId(), resp.GetPodSandboxId(), resp.GetSignal()
			}
		})
	}()
	g := a.shim.signals
	id := strings.TrimSpace(req.GetContainerId())
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "container_id: empty; name the container to signal")
	}
	sig, err := parseSignal(req.GetSignal())
	if err != nil {
		g.metrics.Delivery("api", "invalid", viaNone, codes.InvalidArgument.String())
		return nil, status.Errorf(codes.InvalidArgument, "signal: %v", err)
	}
	c, err := findContainer(ctx, g.rs, id)
	if err != nil {
		g.metrics.Delivery("api", sig.name, viaNone, status.Code(err).String())
		return nil, err
	}
	if c == nil {
		g.metrics.Delivery("api", sig.name, viaNone, codes.NotFound.String())
		return nil, status.Errorf(codes.NotFound, "container_id: container %q not found", id)
	}
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
