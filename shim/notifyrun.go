package shim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/shim/crishimv1"
)

// Error types and reasons of a notifier run, as the ContainerNotifier
// proposal's status has them; the reasons are a fixed set, so they are
// metric labels too.
const (
	notifyTimeout = "Timeout"
	notifyError   = "Error"

	reasonMalformed  = "MalformedAnnotation"
	reasonNotRunning = "ContainerNotRunning"
	reasonActionFail = "ActionFailed"
	reasonActionTime = "ActionTimeout"
	reasonProbeFail  = "ProbeFailed"
)

const (
	// probeInterval spaces the attempts of a failing probe.
	probeInterval = 200 * time.Millisecond
	// execGrace lets the runtime answer an action past its timeout: its own
	// answer (it killed the command) is better than a canceled call.
	execGrace = 2 * time.Second
	// maxOutput bounds the command output quoted in an error message.
	maxOutput = 256
)

// notifierRun is one notifier in one container of a Notify call.
type notifierRun struct {
	name      string
	pod       *runtimeapi.PodSandbox
	container *runtimeapi.Container // nil: the pod has no container of that name
	decl      declaration
	out       *crishimv1.ContainerNotification
}

// runFailure is why a run did not succeed.
type runFailure struct {
	kind, reason, message string
}

// runNotifier runs the action once, then the probe until it succeeds or the
// notifier's timeout passes, and fills run.out.
func (g *signalling) runNotifier(ctx context.Context, run *notifierRun) {
	start := time.Now()
	action := "none"
	var fail *runFailure
	switch {
	case run.decl.err != nil:
		fail = &runFailure{notifyError, reasonMalformed, run.decl.err.Error()}
	case run.container == nil:
		fail = &runFailure{notifyError, reasonNotRunning, fmt.Sprintf("the pod has no container named %q", run.decl.container)}
	case run.container.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING:
		fail = &runFailure{notifyError, reasonNotRunning, fmt.Sprintf("container %s is %s", run.container.GetId(), run.container.GetState())}
	default:
		run.out.ContainerId = run.container.GetId()
		n := run.decl.notifier
		action = n.action()
		deadline := start.Add(n.timeout)
		fail = g.bounded(ctx, run.container.GetId(), deadline, func() *runFailure {
			run.out.StartedAt = timestamppb.Now()
			if fail := g.notifierAction(ctx, run, deadline); fail != nil || len(n.probe) == 0 {
				return fail
			}
			return g.probe(ctx, run.container.GetId(), n.probe, deadline)
		})
	}
	took := time.Since(start)
	if run.container != nil {
		run.out.ContainerId = run.container.GetId()
	}
	result := "succeeded"
	log := g.log.With("notifier", run.name, "pod", run.pod.GetMetadata().GetName(), "pod_namespace", run.pod.GetMetadata().GetNamespace(),
		"pod_sandbox", run.pod.GetId(), "container_name", run.decl.container, "container", run.out.GetContainerId(), "action", action, "took", took)
	if fail == nil {
		run.out.Succeeded = true
		log.Info("notifier succeeded")
	} else {
		result = fail.kind
		run.out.Error = &crishimv1.NotificationError{Type: fail.kind, Reason: fail.reason, Message: fail.message, Time: timestamppb.Now()}
		log.Warn("notifier failed", "type", fail.kind, "reason", fail.reason, "message", fail.message)
	}
	reason := ""
	if fail != nil {
		reason = fail.reason
	}
	g.metrics.NotifierRun(action, result, reason, took)
}

// bounded runs f once a run slot is free in the container and on the node.
// The wait counts against the notifier's timeout: a run that gets no slot
// before it fails with ActionTimeout, the action never started.
func (g *signalling) bounded(ctx context.Context, id string, deadline time.Time, f func() *runFailure) *runFailure {
	wctx, cancel := context.WithDeadline(ctx, deadline)
	release, err := g.runs.acquire(wctx, id)
	cancel()
	if err != nil {
		return &runFailure{notifyTimeout, reasonActionTime, fmt.Sprintf("not started: %v, and none ended in time", err)}
	}
	defer release()
	return f()
}

// notifierAction runs the action, never more than once.
func (g *signalling) notifierAction(ctx context.Context, run *notifierRun, deadline time.Time) *runFailure {
	n := run.decl.notifier
	if len(n.exec) == 0 {
		actx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		via, err := g.deliver(actx, run.container, n.signal)
		g.record("notifier", run.container, n.signal, via, err)
		switch {
		case err == nil:
			return nil
		case status.Code(err) == codes.DeadlineExceeded:
			return &runFailure{notifyTimeout, reasonActionTime, fmt.Sprintf("%s not delivered within %s: %s", n.signal.name, n.timeout, status.Convert(err).Message())}
		}
		return &runFailure{notifyError, reasonActionFail, fmt.Sprintf("%s not delivered: %s", n.signal.name, status.Convert(err).Message())}
	}
	actx, cancel := context.WithDeadline(ctx, deadline.Add(execGrace))
	defer cancel()
	started := time.Now()
	resp, err := g.rs.ExecSync(toRuntime(actx), &runtimeapi.ExecSyncRequest{
		ContainerId: run.container.GetId(), Cmd: n.exec, Timeout: seconds(n.timeout),
	})
	switch {
	case err != nil && status.Code(err) == codes.DeadlineExceeded, err == nil && execTimedOut(resp, started, n.timeout):
		return &runFailure{notifyTimeout, reasonActionTime, fmt.Sprintf("exec %q did not finish within %s", n.exec, n.timeout)}
	case err != nil:
		return &runFailure{notifyError, reasonActionFail, fmt.Sprintf("exec %q: %s", n.exec, status.Convert(err).Message())}
	case resp.GetExitCode() != 0:
		return &runFailure{notifyError, reasonActionFail, fmt.Sprintf("exec %q exited with code %d%s", n.exec, resp.GetExitCode(), output(resp))}
	}
	return nil
}

// probe runs the probe until it succeeds or the deadline passes. Each
// attempt is bounded by the time left.
func (g *signalling) probe(ctx context.Context, id string, cmd []string, deadline time.Time) *runFailure {
	pctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	last := "no attempt: the action used up the timeout"
	finished := false // some attempt ended by itself, and last says how
	for pctx.Err() == nil {
		started, left := time.Now(), time.Until(deadline)
		resp, err := g.rs.ExecSync(toRuntime(pctx), &runtimeapi.ExecSyncRequest{
			ContainerId: id, Cmd: cmd, Timeout: seconds(left),
		})
		switch {
		case err == nil && resp.GetExitCode() == 0:
			return nil
		case err == nil && execTimedOut(resp, started, left),
			err != nil && (status.Code(err) == codes.DeadlineExceeded || errors.Is(pctx.Err(), context.DeadlineExceeded)):
			// The deadline cut this attempt short; an earlier attempt that
			// finished says more about why the probe fails.
			if !finished {
				last = "the last attempt did not finish in time"
			}
		case err == nil:
			last, finished = fmt.Sprintf("exited with code %d%s", resp.GetExitCode(), output(resp)), true
		default:
			last, finished = status.Convert(err).Message(), true
		}
		select {
		case <-pctx.Done():
		case <-time.After(probeInterval):
		}
	}
	if ctx.Err() != nil {
		return &runFailure{notifyTimeout, reasonProbeFail, fmt.Sprintf("probe %q: the Notify call ended first (%v); last attempt: %s", cmd, ctx.Err(), last)}
	}
	return &runFailure{notifyTimeout, reasonProbeFail, fmt.Sprintf("probe %q did not succeed in time; last attempt: %s", cmd, last)}
}

// execTimedOut tells an ExecSync answer that reports its own timeout. containerd answers
// a command that outlives the request's timeout with DeadlineExceeded; CRI-O answers it
// with exit code -1 ("command timed out"). A process's own exit code is never negative,
// so -1 once the timeout has passed is the runtime's doing, not the command's. CRI-O's
// conmon arms that timeout with GLib's g_timeout_add_seconds, which fires on a whole-second
// tick and so up to a second early (seen: 0.91 s into a 1 s timeout): -1 counts from
// conmonTimerSlack before the timeout.
func execTimedOut(resp *runtimeapi.ExecSyncResponse, started time.Time, timeout time.Duration) bool {
	return resp.GetExitCode() < 0 && time.Since(started) >= timeout-conmonTimerSlack
}

// conmonTimerSlack is how early CRI-O's exec timeout may fire (see execTimedOut).
const conmonTimerSlack = time.Second

// seconds rounds up to whole seconds, at least 1: ExecSync takes seconds,
// and 0 would mean no timeout at all.
func seconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}

// output quotes a failed command's output, shortened.
func output(resp *runtimeapi.ExecSyncResponse) string {
	out := strings.TrimSpace(string(resp.GetStderr()))
	if out == "" {
		out = strings.TrimSpace(string(resp.GetStdout()))
	}
	if out == "" {
		return ""
	}
	if len(out) > maxOutput {
		out = out[:maxOutput] + "..."
	}
	return ": " + out
}
