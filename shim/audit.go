package shim

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/caller"
	"github.com/crishim/crishim/proxy"
)

// The kubelet's labels on every container it creates: the pod and the
// container by name, for audit events.
const (
	labelPodNamespace  = "io.kubernetes.pod.namespace"
	labelPodName       = "io.kubernetes.pod.name"
	labelPodUID        = "io.kubernetes.pod.uid"
	labelContainerName = "io.kubernetes.container.name"
)

// auditWho names a container's pod from its kubelet labels, falling back
// to the CRI metadata (containers not made by a kubelet).
func auditWho(c *runtimeapi.ContainerStatus) audit.Event {
	l := c.GetLabels()
	ev := audit.Event{
		PodNamespace:  l[labelPodNamespace],
		PodName:       l[labelPodName],
		PodUID:        l[labelPodUID],
		ContainerName: l[labelContainerName],
		ContainerID:   c.GetId(),
	}
	if ev.ContainerName == "" {
		ev.ContainerName = c.GetMetadata().GetName()
	}
	return ev
}

// auditEnd fills an ended event with a call's outcome.
func auditEnd(err error) func(*audit.Event) {
	return func(ev *audit.Event) {
		ev.Code = status.Code(err).String()
		if err != nil {
			ev.Error = status.Convert(err).Message()
		}
	}
}

// auditDebugStart is the started event of a debug container create.
func auditDebugStart(ctx context.Context, req *runtimeapi.CreateContainerRequest) audit.Event {
	cfg, pod := req.GetConfig(), req.GetSandboxConfig().GetMetadata()
	return audit.Event{
		Caller:        caller.FromContext(ctx),
		Kind:          audit.KindDebug,
		PodNamespace:  pod.GetNamespace(),
		PodName:       pod.GetName(),
		PodUID:        pod.GetUid(),
		PodSandboxID:  req.GetPodSandboxId(),
		ContainerName: cfg.GetMetadata().GetName(),
		Image:         cfg.GetImage().GetImage(),
		TargetID:      cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetTargetId(),
		Argv:          append(append([]string{}, cfg.GetCommand()...), cfg.GetArgs()...),
		TTY:           cfg.GetTty(),
		Stdin:         cfg.GetStdin(),
	}
}

// execSyncMethods intercepts ExecSync only while it is audited
// (--audit-exec-sync, which reloads): the kubelet's exec probes call it every
// few seconds per probe, and pass through untouched otherwise. With no audit
// log there is nothing to reload into.
func (s *Shim) execSyncMethods() []proxy.Method {
	if s.opts.Audit == nil {
		return nil
	}
	return []proxy.Method{proxy.Unary(runtimeapi.RuntimeService_ExecSync_FullMethodName, s.execSync).When(s.opts.Audit.ExecSync)}
}

func (s *Shim) execSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	if !s.opts.Audit.ExecSync() {
		// Only the grpc relay brings a call here while it is not audited.
		return s.runtimeClient().ExecSync(toRuntime(ctx), req)
	}
	ev := audit.Event{Kind: audit.KindExecSync, ContainerID: req.GetContainerId(), Argv: req.GetCmd()}
	if st, err := s.runtimeClient().ContainerStatus(toRuntime(ctx), &runtimeapi.ContainerStatusRequest{ContainerId: req.GetContainerId()}); err == nil {
		ev = auditWho(st.GetStatus())
		ev.Kind, ev.Argv = audit.KindExecSync, req.GetCmd()
	}
	ev.Caller = caller.FromContext(ctx)
	sess := s.opts.Audit.Start(ev)
	if err := sess.Refused(); err != nil {
		return nil, auditRefused(err)
	}
	resp, err := s.runtimeClient().ExecSync(toRuntime(ctx), req)
	sess.End(func(ev *audit.Event) {
		auditEnd(err)(ev)
		if err == nil {
			ev.ExitCode = audit.Ptr(resp.GetExitCode())
		}
	})
	return resp, err
}

// auditRefused is the status of a session refused under --audit-required:
// the audit log cannot record it. Unavailable, as for a runtime that is
// down: the caller may retry once the log is fixed.
func auditRefused(err error) error {
	return status.Error(codes.Unavailable, err.Error())
}
