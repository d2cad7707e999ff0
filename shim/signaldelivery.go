package shim

import (
	"context"
	"errors"
	"log/slog"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/namespaces"
)

// Delivery paths, as answered by Signal and counted in metrics.
const (
	viaContainerd = "containerd"
	viaPidfd      = "pidfd"
	viaNone       = "none" // refused before anything was sent
)

// signalling delivers signals to containers: the Signal API, signal
// notifiers and emulated stop signals.
type signalling struct {
	configured string // --stop-signal-mode
	rs         runtimeapi.RuntimeServiceClient
	ctrd       *Containerd // nil: deliver through pidfd
	metrics    *metrics.Signals
	log        *slog.Logger
	// stops serialises the deliver-once step of emulated stops per
	// container within this process; the containerd label carries it
	// across processes.
	stops keyLock
	// runs bounds the notifier runs in flight, per container and overall.
	runs *runSlots
}

func (s *Shim) newSignalling() *signalling {
	return &signalling{
		configured: configuredMode(s.opts.StopSignalMode),
		rs:         s.runtimeClient(),
		ctrd:       s.opts.Containerd,
		metrics:    s.opts.SignalMetrics,
		log:        s.logger("signals"),
		runs:       newRunSlots(notifyPerContainer, notifyTotal),
	}
}

// deliver sends sig once to the init process of a running container:
// through containerd's task Kill when crishim has the containerd API, else
// through a pidfd on the PID the runtime reports. After an ambiguous
// failure nothing is retried, by either path: a signal is never sent twice.
func (g *signalling) deliver(ctx context.Context, c *runtimeapi.Container, sig signal) (string, error) {
	if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return viaNone, status.Errorf(codes.FailedPrecondition, "container %s is %s, not running: there is no process to signal", c.GetId(), c.GetState())
	}
	if g.ctrd != nil {
		err := g.ctrd.killTask(ctx, c.GetId(), sig.sys())
		switch {
		case err == nil:
			return viaContainerd, nil
		case errdefs.IsNotFound(err), errdefs.IsFailedPrecondition(err):
			return viaContainerd, status.Errorf(codes.FailedPrecondition, "container %s is not running: %v", c.GetId(), err)
		case ctx.Err() != nil:
			return viaContainerd, status.FromContextError(ctx.Err()).Err()
		}
		return viaContainerd, status.Errorf(codes.Unavailable, "crishim: %v", err)
	}
	return viaPidfd, g.deliverPidfd(ctx, c.GetId(), sig)
}

// deliverPidfd signals the init process found in the runtime's verbose
// status. The pidfd is opened first and the process is then checked to be
// in the container's cgroup: if the PID was reused before the open, the
// check fails; if the process dies after it, the pidfd stays dead. Either
// way no other process is ever signalled.
func (g *signalling) deliverPidfd(ctx context.Context, id string, sig signal) error {
	resp, err := g.rs.ContainerStatus(toRuntime(ctx), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		st := status.Convert(err)
		return status.Errorf(st.Code(), "crishim: status of container %s: %s", id, st.Message())
	}
	if resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return status.Errorf(codes.FailedPrecondition, "container %s is %s, not running", id, resp.GetStatus().GetState())
	}
	pid, err := namespaces.PIDFromVerboseInfo(resp.GetInfo())
	if err != nil {
		return status.Errorf(codes.FailedPrecondition, "container %s: %v", id, err)
	}
	proc, err := namespaces.OpenProcess(pid)
	if err != nil {
		return pidfdStatus(id, err)
	}
	defer proc.Close()
	ok, err := proc.InCgroupMatching(id)
	if err != nil {
		return pidfdStatus(id, err)
	}
	if !ok {
		return status.Errorf(codes.FailedPrecondition,
			"container %s: process %d is not in the container's cgroup (exited and its PID reused?); nothing was signalled", id, pid)
	}
	if err := proc.Signal(sig.sys()); err != nil {
		return pidfdStatus(id, err)
	}
	return nil
}

func pidfdStatus(id string, err error) error {
	if errors.Is(err, namespaces.ErrNoProcess) {
		return status.Errorf(codes.FailedPrecondition, "container %s is not running: %v", id, err)
	}
	return status.Errorf(codes.Internal, "crishim: signal container %s: %v", id, err)
}
