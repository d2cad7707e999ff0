package shim

import (
	"context"
	"log/slog"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/caller"
	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/podspec"
)

// ContainerKinds says what a container the kubelet creates is in its pod's
// spec; podspec.Source reads it from the API server.
type ContainerKinds interface {
	Kind(ctx context.Context, namespace, name, uid, container string) (podspec.Kind, error)
}

// What the kubelet writes that tells an ephemeral container from a regular
// one without asking anyone. API validation forbids ports and lifecycle
// hooks on ephemeral containers, so a container the kubelet annotates with
// either is a regular one; and static pods (config.source file or http, in
// the pod's annotations the kubelet copies into the sandbox config) cannot
// have ephemeral containers.
const (
	annotationContainerPorts   = "io.kubernetes.container.ports"
	annotationContainerPreStop = "io.kubernetes.container.preStopHandler"
	annotationPodConfigSource  = "kubernetes.io/config.source"
)

// ephemeralContainers makes every ephemeral container the kubelet creates a
// debug container, with or without PID namespace TARGET: its image is
// judged by the allowlist and its create audited, as pidTarget does for
// TARGET containers. The kubelet does not say in CRI which containers are
// ephemeral: the pod's spec in the API server does (kinds).
type ephemeralContainers struct {
	images  *debugImages
	kinds   ContainerKinds // nil: no API server, only TARGET containers are known debug containers
	others  bool           // every container of a caller other than the kubelet is one
	audit   *audit.Log
	metrics *metrics.DebugImages
	log     *slog.Logger
}

// create hands req to next (the TARGET handler, which forwards), judging it
// first when it is an ephemeral container without TARGET.
func (e *ephemeralContainers) create(ctx context.Context, req *runtimeapi.CreateContainerRequest,
	next func(context.Context, *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error),
) (*runtimeapi.CreateContainerResponse, error) {
	if !e.debugContainer(ctx, req) {
		return next(ctx, req)
	}
	sess := e.audit.Start(auditDebugStart(ctx, req))
	if err := sess.Refused(); err != nil {
		return nil, auditRefused(err) // --audit-required: no unrecorded debug container
	}
	resp, err := e.createChecked(ctx, req, next)
	sess.End(func(ev *audit.Event) {
		auditEnd(err)(ev)
		ev.ContainerID = resp.GetContainerId()
	})
	return resp, err
}

func (e *ephemeralContainers) createChecked(ctx context.Context, req *runtimeapi.CreateContainerRequest,
	next func(context.Context, *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error),
) (*runtimeapi.CreateContainerResponse, error) {
	// As for TARGET: judged before anything reaches the runtime.
	if err := e.images.check(ctx, req.GetConfig().GetImage()); err != nil {
		return nil, err
	}
	resp, err := next(ctx, req)
	if err == nil {
		e.log.Info("ephemeral container created as a debug container", "container", resp.GetContainerId(),
			"name", req.GetConfig().GetMetadata().GetName(), "pod_sandbox", req.GetPodSandboxId())
	}
	return resp, err
}

// debugContainer says whether req is a debug container this handler judges:
// an ephemeral container the kubelet creates without TARGET (TARGET
// containers, from any client, are pidTarget's), and with others any
// container a caller other than the kubelet creates (crictl by hand). It is
// asked only when the answer changes something: the allowlist is enforced,
// or the audit log is on.
func (e *ephemeralContainers) debugContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) bool {
	if !e.images.policy.Enforced() && e.audit == nil {
		return false
	}
	if req.GetConfig().GetLinux().GetSecurityContext().GetNamespaceOptions().GetPid() == runtimeapi.NamespaceMode_TARGET {
		return false
	}
	if e.others {
		// A caller crishim could not identify counts as another: this
		// setting is for nodes where only the kubelet should create.
		if !caller.FromContext(ctx).IsKubelet() {
			return true
		}
	}
	return e.kubeletEphemeral(ctx, req)
}

// kubeletEphemeral says whether req is one of the ephemeral containers of
// the pod the kubelet's labels name. The API server is asked only when the
// kubelet's own annotations cannot rule the container out.
func (e *ephemeralContainers) kubeletEphemeral(ctx context.Context, req *runtimeapi.CreateContainerRequest) bool {
	cfg := req.GetConfig()
	l, a := cfg.GetLabels(), cfg.GetAnnotations()
	ns, pod, uid, name := l[labelPodNamespace], l[labelPodName], l[labelPodUID], l[labelContainerName]
	if ns == "" || pod == "" || name == "" {
		// Not made by a kubelet: no pod spec to ask.
		return false
	}
	_, ports := a[annotationContainerPorts]
	_, preStop := a[annotationContainerPreStop]
	src, static := req.GetSandboxConfig().GetAnnotations()[annotationPodConfigSource]
	if ports || preStop || (static && src != "api") {
		e.metrics.Lookup(podspec.Regular.String())
		return false
	}
	if e.kinds == nil {
		e.metrics.Lookup(podspec.Unknown.String())
		return false
	}
	kind, err := e.kinds.Kind(ctx, ns, pod, uid, name)
	e.metrics.Lookup(kind.String())
	if err != nil {
		// Not judged: refusing every container whose pod cannot be read
		// would stop a node's pods from restarting while the API server is
		// unreachable. The kubelet creates an ephemeral container right
		// after the API server accepted it, so this is rare for one.
		e.log.Warn("cannot tell whether the kubelet's container is an ephemeral (debug) container; not judged as one",
			"pod", ns+"/"+pod, "container", name, "err", err)
	}
	return kind == podspec.Ephemeral
}
