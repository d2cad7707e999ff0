package shim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/namespaces"
)

// PIDTargetAnnotation is written by crishim on every container created with
// PID namespace TARGET. It is crishim's only record of the join: StartContainer
// reads it back from the runtime, so a crishim restart between create and
// start loses nothing.
const PIDTargetAnnotation = "crishim.io/pid-target"

// targetField names the request field TARGET errors are about.
const targetField = "config.linux.security_context.namespace_options"

// targetRecord is the value of PIDTargetAnnotation (JSON).
type targetRecord struct {
	// Target is the full ID of the container whose PID namespace to join.
	Target string `json:"target"`
	// Mode is how the container was created: native (the runtime was given
	// TARGET) or emulate (the runtime was given CONTAINER and crishim joins
	// at start). It is fixed at create time: a crishim restarted with another
	// mode must still finish what the first one began.
	Mode string `json:"mode"`
}

func parseTargetRecord(s string) (targetRecord, error) {
	var r targetRecord
	if err := json.Unmarshal([]byte(s), &r); err != nil {
		return r, fmt.Errorf("annotation %s: %w", PIDTargetAnnotation, err)
	}
	if r.Target == "" || (r.Mode != PIDTargetNative && r.Mode != PIDTargetEmulate) {
		return r, fmt.Errorf("annotation %s: %q names no target or no mode", PIDTargetAnnotation, s)
	}
	return r, nil
}

// pidTarget implements CRI PID namespace TARGET on top of the runtime:
// validation, native pass-through or emulation, and verification.
type pidTarget struct {
	configured string
	rs         runtimeapi.RuntimeServiceClient
	ctrd       *Containerd // nil: no containerd API
	metrics    *metrics.PIDTarget
	images     *debugImages
	audit      *audit.Log
	log        *slog.Logger
	// pidNamespace is namespaces.PIDNamespace; unit tests replace it to play
	// a runtime that puts containers in the wrong namespace.
	pidNamespace func(pid int) (namespaces.ID, error)
}

// create handles CreateContainer: calls without TARGET pass through; TARGET
// is validated before anything reaches the runtime, then passed on (native)
// or rewritten to CONTAINER (emulate), with the annotation recording it.
func (p *pidTarget) create(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	if _, ok := req.GetConfig().GetAnnotations()[PIDTargetAnnotation]; ok {
		// Only crishim may say which namespace a container joins at start.
		return nil, status.Errorf(codes.InvalidArgument, "config.annotations[%q]: reserved for crishim", PIDTargetAnnotation)
	}
	nsOpts := req.GetConfig().GetLinux().GetSecurityContext().GetNamespaceOptions()
	if nsOpts.GetPid() != runtimeapi.NamespaceMode_TARGET {
		return p.rs.CreateContainer(toRuntime(ctx), req)
	}
	sess := p.audit.Start(auditDebugStart(ctx, req))
	if err := sess.Refused(); err != nil {
		p.metrics.Request("create", pidTargetReject, codes.Unavailable.String())
		return nil, auditRefused(err)
	}
	resp, mode, err := p.createTarget(ctx, req, nsOpts)
	p.metrics.Request("create", mode, status.Code(err).String())
	sess.End(func(ev *audit.Event) {
		auditEnd(err)(ev)
		ev.ContainerID = resp.GetContainerId()
	})
	return resp, err
}

func (p *pidTarget) createTarget(ctx context.Context, req *runtimeapi.CreateContainerRequest, nsOpts *runtimeapi.NamespaceOption) (*runtimeapi.CreateContainerResponse, string, error) {
	if nsOpts.GetTargetId() == "" {
		return nil, pidTargetReject, status.Errorf(codes.InvalidArgument,
			"%s.target_id: empty, but pid is TARGET: name the container whose PID namespace to join", targetField)
	}
	// The image is judged before anything else reaches the runtime: a
	// refused debug container leaves no trace there.
	if err := p.images.check(ctx, req.GetConfig().GetImage()); err != nil {
		return nil, pidTargetReject, err
	}
	mode, reason, err := p.decide(ctx)
	if err != nil {
		return nil, pidTargetReject, err
	}
	if mode == pidTargetReject {
		return nil, mode, status.Errorf(codes.FailedPrecondition, "%s.pid: TARGET is not available: %s", targetField, reason)
	}
	target, err := p.checkTarget(ctx, nsOpts.GetTargetId(), req.GetPodSandboxId())
	if err != nil {
		return nil, mode, err
	}
	rec, err := json.Marshal(targetRecord{Target: target.GetId(), Mode: mode})
	if err != nil {
		return nil, mode, status.Errorf(codes.Internal, "crishim: encode %s: %v", PIDTargetAnnotation, err)
	}
	cfg := req.GetConfig()
	if cfg.Annotations == nil {
		cfg.Annotations = map[string]string{}
	}
	cfg.Annotations[PIDTargetAnnotation] = string(rec)
	if mode == PIDTargetEmulate {
		// The runtime makes a namespace of its own; crishim swaps it for the
		// target's in the spec before the task starts.
		nsOpts.Pid = runtimeapi.NamespaceMode_CONTAINER
		nsOpts.TargetId = ""
	}
	resp, err := p.rs.CreateContainer(toRuntime(ctx), req)
	if err != nil {
		return nil, mode, err
	}
	p.log.Info("container created to join a target PID namespace", "container", resp.GetContainerId(),
		"target", target.GetId(), "pod_sandbox", req.GetPodSandboxId(), "mode", mode)
	return resp, mode, nil
}

// checkTarget finds the target and checks it may be joined: it exists, runs,
// and lives in podID. containerd's own checks are the model; crishim makes
// them for every runtime and before the runtime sees anything.
func (p *pidTarget) checkTarget(ctx context.Context, targetID, podID string) (*runtimeapi.Container, error) {
	target, err := findContainer(ctx, p.rs, targetID)
	if err != nil {
		return nil, err
	}
	if target == nil {
		return nil, status.Errorf(codes.NotFound, "%s.target_id: container %q not found", targetField, targetID)
	}
	if target.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, status.Errorf(codes.FailedPrecondition,
			"%s.target_id: container %s is %s, not running: it has no PID namespace to join", targetField, target.GetId(), target.GetState())
	}
	if target.GetPodSandboxId() != podID {
		return nil, status.Errorf(codes.PermissionDenied,
			"%s.target_id: container %s is in pod sandbox %s, not in %s: a container may join only the processes of its own pod",
			targetField, target.GetId(), target.GetPodSandboxId(), podID)
	}
	return target, nil
}

// start handles StartContainer. A container without crishim's annotation is
// started as it is; one created with TARGET has its target checked again
// (it may have died since), is joined to the target's namespace (emulate),
// started, and verified.
func (p *pidTarget) start(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c, err := findContainer(ctx, p.rs, req.GetContainerId())
	if err != nil || c == nil {
		// The runtime's own answer to a bad or unknown ID is the right one.
		return p.rs.StartContainer(toRuntime(ctx), req)
	}
	raw, ok := c.GetAnnotations()[PIDTargetAnnotation]
	if !ok {
		return p.rs.StartContainer(toRuntime(ctx), req)
	}
	rec, err := parseTargetRecord(raw)
	if err != nil {
		p.metrics.Request("start", pidTargetReject, codes.FailedPrecondition.String())
		return nil, status.Errorf(codes.FailedPrecondition, "container %s: %v; recreate the container", c.GetId(), err)
	}
	resp, err := p.startTarget(ctx, req, c, rec)
	p.metrics.Request("start", rec.Mode, status.Code(err).String())
	return resp, err
}

func (p *pidTarget) startTarget(ctx context.Context, req *runtimeapi.StartContainerRequest, c *runtimeapi.Container, rec targetRecord) (*runtimeapi.StartContainerResponse, error) {
	target, err := p.checkTarget(ctx, rec.Target, c.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	if rec.Mode == PIDTargetEmulate {
		if err := p.join(ctx, c.GetId(), target.GetId()); err != nil {
			return nil, err
		}
	}
	resp, err := p.rs.StartContainer(toRuntime(ctx), req)
	if err != nil {
		return nil, err
	}
	if err := p.verify(ctx, c.GetId(), target.GetId(), rec.Mode); err != nil {
		return nil, err
	}
	return resp, nil
}

// join points the created container's PID namespace at the target task's,
// through the containerd API: the one moment this can happen is between
// create and start, when the spec exists and no process does yet.
func (p *pidTarget) join(ctx context.Context, id, targetID string) error {
	if p.ctrd == nil {
		return status.Errorf(codes.FailedPrecondition,
			"container %s was created to join %s's PID namespace through the containerd API, but --containerd-address is empty", id, targetID)
	}
	pid, err := p.ctrd.taskPID(ctx, targetID)
	if err != nil {
		return containerdStatus(err, "target container %s: no process to join", targetID)
	}
	if err := p.ctrd.joinPIDNamespace(ctx, id, namespaces.PIDPath(pid)); err != nil {
		return containerdStatus(err, "container %s: joining %s's PID namespace", id, targetID)
	}
	p.log.Debug("spec points at the target's PID namespace", "container", id, "target", targetID, "target_pid", pid)
	return nil
}

// containerdStatus turns a containerd client error into a gRPC status for
// the kubelet.
func containerdStatus(err error, format string, args ...any) error {
	code := codes.Unavailable
	switch {
	case errors.Is(err, errNoPIDNamespace):
		code = codes.FailedPrecondition
	case errdefs.IsNotFound(err):
		code = codes.FailedPrecondition
	}
	return status.Errorf(code, "%s: %v", fmt.Sprintf(format, args...), err)
}

func (s *Shim) newPIDTarget() *pidTarget {
	return &pidTarget{
		configured: configuredMode(s.opts.PIDTargetMode),
		rs:         s.runtimeClient(),
		ctrd:       s.opts.Containerd,
		metrics:    s.opts.PIDTargetMetrics,
		images: &debugImages{
			policy:  s.opts.DebugImages,
			images:  runtimeapi.NewImageServiceClient(s.backend.ImageConn()),
			metrics: s.opts.DebugImageMetrics,
			log:     s.logger("debug-images"),
		},
		audit:        s.opts.Audit,
		log:          s.logger("pid-target"),
		pidNamespace: namespaces.PIDNamespace,
	}
}
