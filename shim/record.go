package shim

import (
	"context"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
)

// podRecordMode is what a container's pod asks for in its
// crishim.io/record-sessions annotation. The annotation is the pod
// sandbox's, which CRI reaches through the container's sandbox ID. A pod
// that cannot be read, or a value that is not a mode, asks for nothing
// more than the node records: the session is not refused for it.
func (s *Shim) podRecordMode(ctx context.Context, containerID string) audit.RecordMode {
	log := s.logger("record-sessions")
	rt := s.runtimeClient()
	list, err := rt.ListContainers(toRuntime(ctx), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: containerID}})
	if err != nil || len(list.GetContainers()) != 1 {
		log.Warn("pod's recording annotation not read", "container_id", containerID, "err", err)
		return ""
	}
	sandboxID := list.GetContainers()[0].GetPodSandboxId()
	st, err := rt.PodSandboxStatus(toRuntime(ctx), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sandboxID})
	if err != nil {
		log.Warn("pod's recording annotation not read", "pod_sandbox_id", sandboxID, "err", err)
		return ""
	}
	v, ok := st.GetStatus().GetAnnotations()[audit.RecordAnnotation]
	if !ok {
		return ""
	}
	m, err := audit.ParseRecordMode(v)
	if err != nil {
		log.Warn("pod annotation "+audit.RecordAnnotation+" ignored", "pod_sandbox_id", sandboxID, "err", err, "value", v)
		return ""
	}
	return m
}
