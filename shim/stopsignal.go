package shim

import (
	"bytes"
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StopSignalAnnotation is written by crishim on every container created
// with a stop_signal crishim emulates; its value is the signal's name
// ("SIGUSR1"). It is the only record of the request: StopContainer and
// ContainerStatus read it back from the runtime, so a crishim restart loses
// nothing, and a crishim restarted in another mode still honours it.
const StopSignalAnnotation = "crishim.io/stop-signal"

// stopSignalField names the request field stop-signal errors are about.
const stopSignalField = "config.stop_signal"

// Outcomes of an emulated stop, for logs and metrics.
const (
	stopDelivered        = "delivered"         // only until the wait tells exited from killed
	stopExited           = "exited"            // the stop signal ended the container within the timeout
	stopKilled           = "killed"            // it was still running at the timeout: forwarded with timeout 0
	stopAlreadyDelivered = "already_delivered" // a retry: the signal had been delivered before
	stopNotRunning       = "not_running"       // nothing to signal: forwarded as it came
	stopUnemulated       = "unemulated"        // crishim cannot emulate now: forwarded as it came
	stopDeliveryFailed   = "delivery_failed"   // forwarded as it came, so the container still stops
)

// create handles the stop-signal part of CreateContainer, before TARGET:
// it rejects crishim's annotation from a client and, when crishim emulates
// the requested stop signal, records it. The returned function reports the
// create's result.
func (g *signalling) create(ctx context.Context, req *runtimeapi.CreateContainerRequest) (func(*runtimeapi.CreateContainerResponse, error), error) {
	none := func(*runtimeapi.CreateContainerResponse, error) {}
	if _, ok := req.GetConfig().GetAnnotations()[StopSignalAnnotation]; ok {
		// Only crishim may say which signal it delivers at stop.
		return nil, status.Errorf(codes.InvalidArgument, "config.annotations[%q]: reserved for crishim", StopSignalAnnotation)
	}
	requested := req.GetConfig().GetStopSignal()
	if requested == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return none, nil
	}
	sig, ok := criSignal(requested)
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "%s: %d is not a signal crishim knows", stopSignalField, requested)
	}
	mode, reason, err := g.decideStop(ctx)
	if err != nil {
		g.metrics.Create("unknown", status.Code(err).String())
		return nil, err
	}
	if mode == StopSignalEmulate {
		cfg := req.GetConfig()
		if cfg.Annotations == nil {
			cfg.Annotations = map[string]string{}
		}
		// The field stays as it came: a runtime that does honour it
		// reports it, and crishim's stop ends with timeout 0, which sends
		// no stop signal of the runtime's own.
		cfg.Annotations[StopSignalAnnotation] = sig.name
	}
	return func(resp *runtimeapi.CreateContainerResponse, err error) {
		g.metrics.Create(mode, status.Code(err).String())
		if err != nil {
			return
		}
		log := g.log.With("container", resp.GetContainerId(), "pod_sandbox", req.GetPodSandboxId(), "signal", sig.name, "mode", mode)
		if mode == stopSignalPassThrough {
			log.Warn("container created with a stop signal the runtime ignores", "reason", reason)
			return
		}
		log.Info("container created with a stop signal")
	}, nil
}

// rewriteStatus amends the runtime's ContainerStatus answer (relayed raw,
// see containerMethods): stop_signal is filled in from crishim's annotation
// when the runtime leaves it unset. It never re-encodes what the runtime
// sent: a second occurrence of the status field is appended, which protobuf
// parsers merge into the first (the rule for embedded messages), so the
// kubelet gets the runtime's bytes plus one field. Answers without the
// annotation's key, the kubelet's polling of every other container, cost a
// scan of the bytes and nothing else.
func (g *signalling) rewriteStatus(msg []byte) []byte {
	if !bytes.Contains(msg, stopSignalKey) {
		return msg
	}
	var resp runtimeapi.ContainerStatusResponse
	if err := proto.Unmarshal(msg, &resp); err != nil {
		return msg // the kubelet is the one to report a malformed answer
	}
	st := resp.GetStatus()
	if st == nil || st.GetStopSignal() != runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return msg
	}
	name, ok := st.GetAnnotations()[StopSignalAnnotation]
	if !ok {
		return msg // the key was elsewhere (a verbose answer's info)
	}
	sig, err := parseSignal(name)
	if err != nil {
		return msg
	}
	v, ok := toCRISignal(sig)
	if !ok {
		return msg
	}
	field := protowire.AppendTag(nil, stopSignalFieldNum, protowire.VarintType)
	field = protowire.AppendVarint(field, uint64(v))
	// msg belongs to the relay: write into a copy, never past its end.
	out := make([]byte, len(msg), len(msg)+len(field)+8)
	copy(out, msg)
	out = protowire.AppendTag(out, statusFieldNum, protowire.BytesType)
	return protowire.AppendBytes(out, field)
}

var (
	stopSignalKey = []byte(StopSignalAnnotation)
	// Field numbers from the compiled cri-api, not written out by hand.
	statusFieldNum     = (&runtimeapi.ContainerStatusResponse{}).ProtoReflect().Descriptor().Fields().ByName("status").Number()
	stopSignalFieldNum = (&runtimeapi.ContainerStatus{}).ProtoReflect().Descriptor().Fields().ByName("stop_signal").Number()
)

// stop handles StopContainer. A container with crishim's annotation gets
// its stop signal from crishim, once, then up to the call's timeout to
// exit; then the runtime stops it with timeout 0, which kills what is left.
// Everything else goes to the runtime as it came.
func (g *signalling) stop(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	if req.GetTimeout() <= 0 {
		// Timeout 0 is a kill: the runtime sends no stop signal either.
		return g.rs.StopContainer(toRuntime(ctx), req)
	}
	c, err := findContainer(ctx, g.rs, req.GetContainerId())
	if err != nil || c == nil {
		// The runtime's own answer to a bad or unknown ID is the right one.
		return g.rs.StopContainer(toRuntime(ctx), req)
	}
	name, ok := c.GetAnnotations()[StopSignalAnnotation]
	if !ok {
		return g.rs.StopContainer(toRuntime(ctx), req)
	}
	log := g.log.With("container", c.GetId(), "pod_sandbox", c.GetPodSandboxId(), "signal", name, "timeout", req.GetTimeout())
	sig, err := parseSignal(name)
	if err != nil {
		log.Warn("stop signal annotation unreadable; the runtime stops the container its own way", "err", err)
		g.metrics.Stop(stopUnemulated)
		return g.rs.StopContainer(toRuntime(ctx), req)
	}
	if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		g.metrics.Stop(stopNotRunning)
		return g.rs.StopContainer(toRuntime(ctx), req)
	}
	if g.ctrd == nil {
		log.Warn("cannot deliver the stop signal without the containerd API (--containerd-address is empty); the runtime stops the container its own way")
		g.metrics.Stop(stopUnemulated)
		return g.rs.StopContainer(toRuntime(ctx), req)
	}
	outcome, err := g.deliverStopSignal(ctx, c, sig)
	if err != nil {
		g.metrics.Stop(stopDeliveryFailed)
		log.Error("stop signal not delivered; the runtime stops the container its own way", "err", err)
		return g.rs.StopContainer(toRuntime(ctx), req)
	}
	if outcome != stopNotRunning {
		wctx, cancel := context.WithTimeout(ctx, time.Duration(req.GetTimeout())*time.Second)
		err = g.ctrd.waitTask(wctx, c.GetId())
		cancel()
		if err != nil && ctx.Err() != nil {
			// The caller gave up; its retry finds the signal delivered.
			log.Warn("StopContainer abandoned by the caller while the container handled its stop signal", "err", ctx.Err())
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if outcome == stopDelivered {
			outcome = stopExited
			if err != nil {
				outcome = stopKilled
			}
		}
		if err == nil {
			g.awaitExitRecorded(ctx, c.GetId())
		}
	}
	g.metrics.Stop(outcome)
	log.Info("stop signal handled; stopping with timeout 0", "outcome", outcome)
	fwd := &runtimeapi.StopContainerRequest{ContainerId: c.GetId(), Timeout: 0}
	return g.rs.StopContainer(toRuntime(ctx), fwd)
}

// exitRecordPoll and exitRecordBound pace and bound the wait for the
// runtime to record an exit the containerd API has already reported.
const (
	exitRecordPoll  = 20 * time.Millisecond
	exitRecordBound = 10 * time.Second
)

// awaitExitRecorded waits until the runtime's CRI state shows the task's
// exit. containerd's CRI plugin learns of it from an event, a moment after
// Wait returns; a StopContainer in between makes it kill a task whose shim
// is gone, and it answers Unknown ("ttrpc: closed"). Past the bound the
// stop is forwarded anyway and the runtime answers for itself.
func (g *signalling) awaitExitRecorded(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, exitRecordBound)
	defer cancel()
	for {
		resp, err := g.rs.ContainerStatus(toRuntime(ctx), &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil || resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(exitRecordPoll):
		}
	}
}

// deliverStopSignal delivers the stop signal unless it was delivered
// before. The record is written before the signal is sent: should crishim
// die between the two, the signal is lost (the retry waits and kills)
// rather than sent twice.
func (g *signalling) deliverStopSignal(ctx context.Context, c *runtimeapi.Container, sig signal) (string, error) {
	unlock, err := g.stops.lock(ctx, c.GetId())
	if err != nil {
		return "", err
	}
	defer unlock()
	running, err := g.ctrd.taskRunning(ctx, c.GetId())
	if err != nil {
		return "", err
	}
	if !running {
		return stopNotRunning, nil
	}
	prev, err := g.ctrd.stopSignalDelivered(ctx, c.GetId())
	if err != nil {
		return "", err
	}
	if prev != "" {
		g.log.Info("stop signal already delivered; not again", "container", c.GetId(), "pod_sandbox", c.GetPodSandboxId(), "delivered", prev)
		return stopAlreadyDelivered, nil
	}
	if err := g.ctrd.markStopSignalDelivered(ctx, c.GetId(), sig.name, time.Now()); err != nil {
		return "", err
	}
	via, err := g.deliver(ctx, c, sig)
	g.record("stop", c, sig, via, err)
	if status.Code(err) == codes.FailedPrecondition {
		return stopNotRunning, nil
	}
	if err != nil {
		return "", err
	}
	return stopDelivered, nil
}

// record logs and counts one delivery.
func (g *signalling) record(origin string, c *runtimeapi.Container, sig signal, via string, err error) {
	code := status.Code(err)
	g.metrics.Delivery(origin, sig.name, via, code.String())
	log := g.log.With("origin", origin, "container", c.GetId(), "container_name", c.GetMetadata().GetName(),
		"pod_sandbox", c.GetPodSandboxId(), "signal", sig.name, "via", via, "code", code.String())
	if err != nil {
		log.Warn("signal not delivered", "err", err)
		return
	}
	log.Info("signal delivered")
}
