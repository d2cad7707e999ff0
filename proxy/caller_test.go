package proxy

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/caller"
)

// seenCalls records the calls crishim's gRPC server ran, with their caller.
type seenCalls struct {
	mu    sync.Mutex
	calls map[string]*caller.Process
}

func (s *seenCalls) interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		s.mu.Lock()
		s.calls[info.FullMethod] = caller.FromContext(ss.Context())
		s.mu.Unlock()
		return handler(srv, ss)
	}
}

func (s *seenCalls) get(method string) (*caller.Process, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.calls[method]
	return p, ok
}

// Every call crishim's gRPC server runs knows its caller: the process at
// the other end of the CRI socket. The calls of callers other than the
// kubelet to audited methods come to the server too (relayed from there);
// the kubelet's stay on the relay.
func TestCallerReachesTheGRPCServer(t *testing.T) {
	const (
		version = "/runtime.v1.RuntimeService/Version"
		status  = "/runtime.v1.RuntimeService/ContainerStatus"
		listing = "/runtime.v1.RuntimeService/ListContainers"
	)
	for _, kubelet := range []bool{false, true} {
		sock := fakeSock(t)
		startFake(t, sock, &fakeRuntime{})
		handled := make(chan *caller.Process, 1)
		intercepted := Unary(version, func(ctx context.Context, _ *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
			handled <- caller.FromContext(ctx)
			return &runtimeapi.VersionResponse{}, nil
		})
		seen := &seenCalls{calls: map[string]*caller.Process{}}
		opts := ServerOptions{
			Intercept: []Method{intercepted},
			Stream:    []grpc.StreamServerInterceptor{seen.interceptor()},
			Audited:   func(m string) bool { return m == status },
		}
		if kubelet {
			opts.identify = func(nc net.Conn) *caller.Process {
				p := identifyPeer(nc)
				p.Kubelet = true
				return p
			}
		}
		p := startProxyWith(t, dialBackend(t, sock), opts)
		rs := runtimeapi.NewRuntimeServiceClient(p.conn)
		if _, err := rs.Version(context.Background(), &runtimeapi.VersionRequest{}); err != nil {
			t.Fatal(err)
		}
		got := <-handled
		if got == nil || int(got.PID) != os.Getpid() || int(got.UID) != os.Getuid() || got.Exited || got.Kubelet != kubelet {
			t.Fatalf("kubelet %v: the intercepted call's caller is %+v; want this process (pid %d)", kubelet, got, os.Getpid())
		}
		_, _ = rs.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: "abc"})
		_, _ = rs.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{})
		st, ok := seen.get(status)
		// The server sees only the audited calls of others.
		if want := !kubelet; ok != want {
			t.Errorf("kubelet %v: ContainerStatus reached crishim's gRPC server: %v, want %v", kubelet, ok, want)
		}
		if ok && (st == nil || int(st.PID) != os.Getpid() || st.Kubelet != kubelet) {
			t.Errorf("kubelet %v: ContainerStatus's caller is %+v", kubelet, st)
		}
		if _, ok := seen.get(listing); ok {
			t.Errorf("kubelet %v: ListContainers (not audited) reached crishim's gRPC server: %v", kubelet, ok)
		}
	}
}
