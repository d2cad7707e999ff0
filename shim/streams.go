package shim

import (
	"cmp"
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/caller"
	"github.com/crishim/crishim/proxy"
	"github.com/crishim/crishim/streaming"
)

// streamMethods intercepts the three calls that answer with a stream URL,
// when crishim runs its streaming server; without one they pass through and
// clients get the runtime's own URLs.
func (s *Shim) streamMethods() []proxy.Method {
	if s.opts.Streaming == nil {
		return nil
	}
	return []proxy.Method{
		proxy.Unary(runtimeapi.RuntimeService_Exec_FullMethodName, s.exec),
		proxy.Unary(runtimeapi.RuntimeService_Attach_FullMethodName, s.attach),
		proxy.Unary(runtimeapi.RuntimeService_PortForward_FullMethodName, s.portForward),
	}
}

// exec answers a crishim URL for a request that can succeed now: a request
// the runtime would refuse at connect time would otherwise cost the client a
// token and a round trip to learn it.
func (s *Shim) exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	url, err := s.containerStreamURL(ctx, streaming.Exec, validateExec(req), req, &req.ContainerId)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ExecResponse{Url: url}, nil
}

func (s *Shim) attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	url, err := s.containerStreamURL(ctx, streaming.Attach, validateAttach(req), req, &req.ContainerId)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.AttachResponse{Url: url}, nil
}

func (s *Shim) portForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if err := s.admitStream(validatePortForward(req)); err != nil {
		return nil, err
	}
	who, err := s.streamSandboxReady(ctx, req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	req.PodSandboxId = who.PodSandboxID
	url, err := s.opts.Streaming.IssueFor(ctx, streaming.PortForward, req, who)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PortForwardResponse{Url: url}, nil
}

// containerStreamURL is exec's and attach's: the request admitted, its
// container found running and id (the request's container_id) made its
// full ID for the session's events, and a URL issued, recorded as the pod
// asks.
func (s *Shim) containerStreamURL(ctx context.Context, kind streaming.Kind, invalid error, req any, id *string) (string, error) {
	if err := s.admitStream(invalid); err != nil {
		return "", err
	}
	who, err := s.streamContainerRunning(ctx, *id)
	if err != nil {
		return "", err
	}
	*id = who.ContainerID
	return s.opts.Streaming.IssueRecorded(ctx, kind, req, who, s.podRecordMode(ctx, *id))
}

// admitStream is the start of all three: an invalid request (invalid, its
// validation's verdict) and, under --audit-required, any request while the
// audit log cannot be written are answered before the runtime is asked.
func (s *Shim) admitStream(invalid error) error {
	if invalid != nil {
		return invalid
	}
	if err := s.opts.Audit.Refusal(); err != nil {
		return auditRefused(err)
	}
	return nil
}

// The checks are those of the CRI spec and k8s.io/cri-streaming, which the
// runtimes apply when they issue their own URLs.

func validateExec(req *runtimeapi.ExecRequest) error {
	if req.GetContainerId() == "" {
		return status.Error(codes.InvalidArgument, "container_id is required")
	}
	if len(req.GetCmd()) == 0 {
		return status.Error(codes.InvalidArgument, "cmd is required: the command to run in the container")
	}
	return validateStdio(req.GetTty(), req.GetStdin(), req.GetStdout(), req.GetStderr())
}

func validateAttach(req *runtimeapi.AttachRequest) error {
	if req.GetContainerId() == "" {
		return status.Error(codes.InvalidArgument, "container_id is required")
	}
	return validateStdio(req.GetTty(), req.GetStdin(), req.GetStdout(), req.GetStderr())
}

func validateStdio(tty, stdin, stdout, stderr bool) error {
	if tty && stderr {
		return status.Error(codes.InvalidArgument, "tty and stderr cannot both be true: a TTY carries stdout and stderr as one stream")
	}
	if !stdin && !stdout && !stderr {
		return status.Error(codes.InvalidArgument, "one of stdin, stdout and stderr must be true")
	}
	return nil
}

func validatePortForward(req *runtimeapi.PortForwardRequest) error {
	if req.GetPodSandboxId() == "" {
		return status.Error(codes.InvalidArgument, "pod_sandbox_id is required")
	}
	for i, p := range req.GetPort() {
		if p < 1 || p > 65535 {
			return status.Errorf(codes.InvalidArgument, "port[%d] = %d: not a TCP port (1-65535)", i, p)
		}
	}
	return nil
}

// streamContainerRunning: exec and attach need a running container. It
// answers who the stream reaches and who asked (the session is the CRI
// caller's, whoever later connects to its URL), for the audit log, with the
// container's full ID (id may be a prefix the runtime resolved).
func (s *Shim) streamContainerRunning(ctx context.Context, id string) (audit.Event, error) {
	resp, err := s.runtimeClient().ContainerStatus(toRuntime(ctx), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if status.Code(err) == codes.NotFound {
		return audit.Event{}, status.Errorf(codes.NotFound, "container_id %q: no such container", id)
	}
	if err != nil {
		return audit.Event{}, err // the runtime's own status, e.g. Unavailable
	}
	if st := resp.GetStatus().GetState(); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return audit.Event{}, status.Errorf(codes.FailedPrecondition, "container_id %q: container is %s, not running", id, st)
	}
	who := auditWho(resp.GetStatus())
	if who.ContainerID == "" {
		who.ContainerID = id
	}
	who.Caller = caller.FromContext(ctx)
	return who, nil
}

// streamSandboxReady: port-forward needs a ready pod sandbox (its network
// namespace is where the ports are).
func (s *Shim) streamSandboxReady(ctx context.Context, id string) (audit.Event, error) {
	resp, err := s.runtimeClient().PodSandboxStatus(toRuntime(ctx), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if status.Code(err) == codes.NotFound {
		return audit.Event{}, status.Errorf(codes.NotFound, "pod_sandbox_id %q: no such pod sandbox", id)
	}
	if err != nil {
		return audit.Event{}, err
	}
	if st := resp.GetStatus().GetState(); st != runtimeapi.PodSandboxState_SANDBOX_READY {
		return audit.Event{}, status.Errorf(codes.FailedPrecondition, "pod_sandbox_id %q: pod sandbox is %s, not ready", id, st)
	}
	md := resp.GetStatus().GetMetadata()
	full := cmp.Or(resp.GetStatus().GetId(), id)
	return audit.Event{PodNamespace: md.GetNamespace(), PodName: md.GetName(), PodUID: md.GetUid(), PodSandboxID: full, Caller: caller.FromContext(ctx)}, nil
}
