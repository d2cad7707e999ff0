package nodeinstall

import (
	"context"
	"fmt"
	"time"

	remote "k8s.io/cri-client/pkg"
)

// CRIStatus asks the CRI runtime at endpoint for Status, with the kubelet's own client, and
// fails unless its RuntimeReady condition is true: the check that crishim answers on its
// socket before and after the kubelet is pointed at it.
func CRIStatus(ctx context.Context, endpoint string) error {
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(10 * time.Second).Build(ctx)
	if err != nil {
		return fmt.Errorf("CRI client for %s: %w", endpoint, err)
	}
	defer func() { _ = rs.Close(context.WithoutCancel(ctx)) }()
	st, err := rs.Status(ctx, false)
	if err != nil {
		return fmt.Errorf("CRI Status of %s: %w", endpoint, err)
	}
	for _, c := range st.GetStatus().GetConditions() {
		if c.GetType() == "RuntimeReady" {
			if !c.GetStatus() {
				return fmt.Errorf("CRI Status of %s: RuntimeReady false: %s %s", endpoint, c.GetReason(), c.GetMessage())
			}
			return nil
		}
	}
	return fmt.Errorf("CRI Status of %s: no RuntimeReady condition", endpoint)
}
