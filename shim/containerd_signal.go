package shim

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
)

// StopSignalDeliveredLabel is the containerd label crishim sets on a
// container before it delivers the container's emulated stop signal. It is
// the one fact crishim learns after create, and it lives on the container in
// the runtime, not in crishim: a retried StopContainer, even to a restarted
// crishim, finds it and does not deliver again. Its value is the signal and
// the time (RFC 3339).
const StopSignalDeliveredLabel = "crishim.io/stop-signal-delivered"

// killTask sends sig to the init process of the container's task (not to
// the other processes: the same as a runtime's stop signal).
func (c *Containerd) killTask(ctx context.Context, containerID string, sig syscall.Signal) error {
	_, err := c.client.TaskService().Kill(ctx, &tasks.KillRequest{ContainerID: containerID, Signal: uint32(sig)})
	if err != nil {
		return fmt.Errorf("containerd kill %s of task %s: %w", sig, containerID, errgrpc.ToNative(err))
	}
	return nil
}

// taskRunning tells whether the container's task is running; no task (not
// started, or exited and deleted) is not running.
func (c *Containerd) taskRunning(ctx context.Context, containerID string) (bool, error) {
	resp, err := c.client.TaskService().Get(ctx, &tasks.GetRequest{ContainerID: containerID})
	if err != nil {
		if err := errgrpc.ToNative(err); errdefs.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("containerd task of %s: %w", containerID, errgrpc.ToNative(err))
	}
	return resp.GetProcess().GetStatus() == task.Status_RUNNING, nil
}

// waitTask returns when the container's task has exited, or with ctx's
// error. The CRI plugin deletes an exited task at once, so "no task" counts
// as exited too.
func (c *Containerd) waitTask(ctx context.Context, containerID string) error {
	_, err := c.client.TaskService().Wait(ctx, &tasks.WaitRequest{ContainerID: containerID})
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := errgrpc.ToNative(err); errdefs.IsNotFound(err) {
		return nil
	}
	return fmt.Errorf("containerd wait for task %s: %w", containerID, errgrpc.ToNative(err))
}

// stopSignalDelivered reads StopSignalDeliveredLabel; empty means never.
func (c *Containerd) stopSignalDelivered(ctx context.Context, containerID string) (string, error) {
	rec, err := c.client.ContainerService().Get(ctx, containerID)
	if err != nil {
		return "", fmt.Errorf("containerd container %s: %w", containerID, errgrpc.ToNative(err))
	}
	return rec.Labels[StopSignalDeliveredLabel], nil
}

// markStopSignalDelivered sets StopSignalDeliveredLabel. Only that label is
// written (field path), so nothing else of the record can be lost to a
// concurrent update by the runtime.
func (c *Containerd) markStopSignalDelivered(ctx context.Context, containerID, signalName string, at time.Time) error {
	store := c.client.ContainerService()
	rec, err := store.Get(ctx, containerID)
	if err != nil {
		return fmt.Errorf("containerd container %s: %w", containerID, errgrpc.ToNative(err))
	}
	if rec.Labels == nil {
		rec.Labels = map[string]string{}
	}
	rec.Labels[StopSignalDeliveredLabel] = signalName + " " + at.UTC().Format(time.RFC3339Nano)
	if _, err := store.Update(ctx, rec, "labels."+StopSignalDeliveredLabel); err != nil {
		return fmt.Errorf("label containerd container %s: %w", containerID, errgrpc.ToNative(err))
	}
	return nil
}
