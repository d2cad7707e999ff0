package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
)

// idempotentCalls stop and remove a container and a pod sandbox by ID.
var idempotentCalls = []struct {
	method string
	call   func(ctx context.Context, rs internalapi.RuntimeService, id string) error
}{
	{"StopContainer", func(ctx context.Context, rs internalapi.RuntimeService, id string) error {
		return rs.StopContainer(ctx, id, 10)
	}},
	{"RemoveContainer", func(ctx context.Context, rs internalapi.RuntimeService, id string) error {
		return rs.RemoveContainer(ctx, id)
	}},
	{"StopPodSandbox", func(ctx context.Context, rs internalapi.RuntimeService, id string) error {
		return rs.StopPodSandbox(ctx, id)
	}},
	{"RemovePodSandbox", func(ctx context.Context, rs internalapi.RuntimeService, id string) error {
		return rs.RemovePodSandbox(ctx, id)
	}},
}

// TestIdempotentStopAndRemoveThroughCrishim: the CRI conformance suite's
// Idempotence specs stop and remove IDs the runtime does not know and
// expect success. Directly, containerd 1.6 answers NotFound to some; through
// crishim every one succeeds, with StopContainer intercepted (stop signals
// emulated) or relayed (native), and each NotFound turned OK is counted.
func TestIdempotentStopAndRemoveThroughCrishim(t *testing.T) {
	ctx := context.Background()
	const unknown = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	direct, _ := criClients(t, testbed.Endpoint)
	notFound := map[string]bool{}
	for _, c := range idempotentCalls {
		err := c.call(ctx, direct, unknown)
		t.Logf("directly, containerd answers %s of an unknown ID: %v", c.method, status.Convert(err).Code())
		switch status.Code(err) {
		case codes.OK:
		case codes.NotFound:
			notFound[c.method] = true
		default:
			t.Errorf("directly, %s of an unknown ID: %v", c.method, err)
		}
	}
	for _, mode := range []string{"emulate", "native"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "emulate" {
				needContainerdAPI(t)
			}
			p := startCrishim(t, testbed.Endpoint, "--stop-signal-mode", mode)
			rs, _ := criClients(t, p.Endpoint)
			for _, c := range idempotentCalls {
				if err := c.call(ctx, rs, unknown); err != nil {
					t.Errorf("through crishim, %s of an unknown ID: %v; want OK", c.method, err)
				}
			}
			m := metricsText(t, p.Metrics)
			for _, c := range idempotentCalls {
				line := fmt.Sprintf(`crishim_idempotent_notfound_total{method="/runtime.v1.RuntimeService/%s"} 1`, c.method)
				if strings.Contains(m, line) != notFound[c.method] {
					t.Errorf("%s: the metric has %q: %v; containerd answered NotFound: %v", c.method, line, !notFound[c.method], notFound[c.method])
				}
			}
		})
	}
}
