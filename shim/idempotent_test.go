package shim

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/proxy"
)

// notFoundRuntime answers NotFound to stopping and removing anything, as
// containerd 1.6 does for IDs it does not know, and Unavailable for "down".
type notFoundRuntime struct {
	*targetFakeRuntime
}

func notFound(id string) error {
	if id == "down" {
		return status.Error(codes.Unavailable, "runtime down")
	}
	return status.Errorf(codes.NotFound, "an error occurred when try to find %q: not found", id)
}

func (f notFoundRuntime) StopContainer(_ context.Context, in *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	return nil, notFound(in.GetContainerId())
}

func (f notFoundRuntime) RemoveContainer(_ context.Context, in *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	return nil, notFound(in.GetContainerId())
}

func (f notFoundRuntime) StopPodSandbox(_ context.Context, in *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	return nil, notFound(in.GetPodSandboxId())
}

func (f notFoundRuntime) RemovePodSandbox(_ context.Context, in *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	return nil, notFound(in.GetPodSandboxId())
}

// startNotFoundShim is a shim in front of a notFoundRuntime, with stop
// signals native (StopContainer relayed) or emulated (intercepted).
func startNotFoundShim(t *testing.T, mode string, m *metrics.Idempotent) *Shim {
	t.Helper()
	f := newTargetFake()
	s := New(serveFakeRuntime(t, notFoundRuntime{f}), Options{StopSignalMode: mode, IdempotentMetrics: m})
	if mode == StopSignalEmulate {
		s.signals.ctrd = f.containerd()
	}
	return s
}

// serveShim serves s on a socket the way crishim does, and returns a CRI
// client to it.
func serveShim(t *testing.T, s *Shim) runtimeapi.RuntimeServiceClient {
	t.Helper()
	return serveShimWith(t, s, proxy.ServerOptions{Intercept: s.Intercepted(), Services: s.Services()})
}

// serveShimWith serves s with opts on a socket of the test's, and returns a
// CRI client to it.
func serveShimWith(t *testing.T, s *Shim, opts proxy.ServerOptions) runtimeapi.RuntimeServiceClient {
	t.Helper()
	srv, err := proxy.NewServer(s.backend, opts)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "crishim.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

// TestStopAndRemoveOfUnknownIDsSucceed: the CRI makes stopping and removing
// idempotent, so what the runtime does not know is already stopped and
// removed. StopContainer is relayed (stop signals native) or intercepted
// (emulated); both must answer the same.
func TestStopAndRemoveOfUnknownIDsSucceed(t *testing.T) {
	ctx := context.Background()
	calls := []struct {
		method string
		call   func(rs runtimeapi.RuntimeServiceClient, id string) error
	}{
		{"StopContainer", func(rs runtimeapi.RuntimeServiceClient, id string) error {
			_, err := rs.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 10})
			return err
		}},
		{"RemoveContainer", func(rs runtimeapi.RuntimeServiceClient, id string) error {
			_, err := rs.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
			return err
		}},
		{"StopPodSandbox", func(rs runtimeapi.RuntimeServiceClient, id string) error {
			_, err := rs.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
			return err
		}},
		{"RemovePodSandbox", func(rs runtimeapi.RuntimeServiceClient, id string) error {
			_, err := rs.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
			return err
		}},
	}
	for _, mode := range []string{StopSignalNative, StopSignalEmulate} {
		t.Run(mode, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m := metrics.NewIdempotent(reg)
			s := startNotFoundShim(t, mode, m)
			rs := serveShim(t, s)
			for _, c := range calls {
				if err := c.call(rs, "unknown"); err != nil {
					t.Errorf("%s of an unknown ID: %v; want OK", c.method, err)
				}
				if err := c.call(rs, "down"); status.Code(err) != codes.Unavailable {
					t.Errorf("%s with the runtime down: %v; want Unavailable", c.method, err)
				}
			}
			got := notFoundCounts(t, reg)
			for _, c := range calls {
				if n := got["/runtime.v1.RuntimeService/"+c.method]; n != 1 {
					t.Errorf("%s: crishim_idempotent_notfound_total = %v, want 1", c.method, n)
				}
			}
		})
	}
}

// notFoundCounts reads crishim_idempotent_notfound_total by method.
func notFoundCounts(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, metric := range mf.GetMetric() {
			out[metric.GetLabel()[0].GetValue()] = metric.GetCounter().GetValue()
		}
	}
	return out
}
