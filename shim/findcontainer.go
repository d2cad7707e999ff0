package shim

import (
	"context"
	"strings"

	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// findContainer looks a container up by ID (or an unambiguous prefix, as
// runtimes resolve them); nil without error means there is none. Every
// feature that acts on a container it is given by ID resolves it here.
func findContainer(ctx context.Context, rs runtimeapi.RuntimeServiceClient, id string) (*runtimeapi.Container, error) {
	resp, err := rs.ListContainers(toRuntime(ctx), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id}})
	if err != nil {
		st := status.Convert(err)
		return nil, status.Errorf(st.Code(), "crishim: looking up container %q: %s", id, st.Message())
	}
	var prefixed []*runtimeapi.Container
	for _, c := range resp.GetContainers() {
		if c.GetId() == id {
			return c, nil
		}
		if strings.HasPrefix(c.GetId(), id) {
			prefixed = append(prefixed, c)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0], nil
	}
	return nil, nil
}
