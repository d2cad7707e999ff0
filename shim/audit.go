package shim

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/caller"
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

// auditRefused is the status of a session refused under --audit-required:
// the audit log cannot record it. Unavailable, as for a runtime that is
// down: the caller may retry once the log is fixed.
func auditRefused(err error) error {
	return status.Error(codes.Unavailable, err.Error())
}
