package shim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/namespaces"
)

// stopTimeout bounds the StopContainer crishim sends for a container it
// refuses to leave running; it must happen even if the caller gave up.
const stopTimeout = 30 * time.Second

// verify checks that a just-started container shares its target's PID
// namespace. Whatever the mode, the runtime's word is not taken for it: a
// runtime that ignores TARGET starts a debug shell that silently sees only
// itself. A container that fails the check, or cannot be checked, is
// stopped.
func (p *pidTarget) verify(ctx context.Context, id, targetID, mode string) error {
	want, err := p.containerPIDNamespace(ctx, targetID)
	if err != nil {
		return p.refuse(ctx, id, mode, fmt.Sprintf("crishim could not verify that container %s joined %s's PID namespace: target: %v", id, targetID, err))
	}
	got, err := p.containerPIDNamespace(ctx, id)
	if err != nil {
		// The target's process is visible, so crishim sees the host's
		// /proc: a missing process of the new container has exited, and
		// nothing runs in a wrong namespace any more. Short commands (a
		// debug "ps") end before crishim can look, often before the
		// runtime has noticed.
		if errors.Is(err, namespaces.ErrNoProcess) || p.exited(ctx, id) {
			p.log.Warn("container exited before its PID namespace could be verified", "container", id, "target", targetID, "mode", mode)
			return nil
		}
		return p.refuse(ctx, id, mode, fmt.Sprintf("crishim could not verify that container %s joined %s's PID namespace: %v", id, targetID, err))
	}
	if got != want {
		return p.refuse(ctx, id, mode, fmt.Sprintf("container %s started in PID namespace %v, not in target %s's %v: the runtime did not honour TARGET (mode %s)", id, got, targetID, want, mode))
	}
	p.log.Info("container joined the target's PID namespace", "container", id, "target", targetID, "mode", mode, "pid_namespace", got.String())
	return nil
}

// refuse stops a container that must not run and returns the error for the
// caller.
func (p *pidTarget) refuse(ctx context.Context, id, mode, why string) error {
	p.metrics.VerificationFailure(mode)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(toRuntime(ctx)), stopTimeout)
	defer cancel()
	if _, err := p.rs.StopContainer(sctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 0}); err != nil {
		p.log.Error("verification failed and the container could not be stopped", "container", id, "reason", why, "err", err)
		return status.Errorf(codes.Internal, "%s; stopping it failed too: %v", why, err)
	}
	p.log.Error("verification failed; container stopped", "container", id, "reason", why)
	return status.Errorf(codes.Internal, "%s; crishim stopped the container", why)
}

// containerPIDNamespace is the PID namespace of a container's init process.
func (p *pidTarget) containerPIDNamespace(ctx context.Context, id string) (namespaces.ID, error) {
	pid, err := p.containerPID(ctx, id)
	if err != nil {
		return namespaces.ID{}, err
	}
	return p.pidNamespace(pid)
}

// containerPID is the host PID of a container's init process: from the
// containerd task when crishim has the containerd API, else from the
// runtime's verbose ContainerStatus, which any CRI runtime may fill.
func (p *pidTarget) containerPID(ctx context.Context, id string) (int, error) {
	var ctrdErr error
	if p.ctrd != nil {
		pid, err := p.ctrd.taskPID(ctx, id)
		if err == nil {
			return pid, nil
		}
		ctrdErr = err
	}
	resp, err := p.rs.ContainerStatus(toRuntime(ctx), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return 0, errors.Join(ctrdErr, fmt.Errorf("container status of %s: %w", id, err))
	}
	pid, err := namespaces.PIDFromVerboseInfo(resp.GetInfo())
	if err != nil {
		return 0, errors.Join(ctrdErr, fmt.Errorf("container %s: %w", id, err))
	}
	return pid, nil
}

// exited tells whether the container has stopped running.
func (p *pidTarget) exited(ctx context.Context, id string) bool {
	resp, err := p.rs.ContainerStatus(toRuntime(ctx), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	return err == nil && resp.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_EXITED
}
