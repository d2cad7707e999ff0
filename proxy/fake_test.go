package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeRuntime is an in-process CRI runtime with knobs for fault injection.
// It embeds Unimplemented on purpose: it is the backend, not the proxy.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	mu           sync.Mutex
	lastMD       metadata.MD
	lastDeadline time.Time
	lastUnknown  []byte
	delay        time.Duration
	canceled     chan struct{}
	started      chan struct{} // closed when a delayed Version begins to wait
}

func (f *fakeRuntime) record(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastMD, _ = metadata.FromIncomingContext(ctx)
	f.lastDeadline, _ = ctx.Deadline()
}

func (f *fakeRuntime) Version(ctx context.Context, in *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	f.record(ctx)
	f.mu.Lock()
	f.lastUnknown = in.ProtoReflect().GetUnknown()
	delay := f.delay
	f.mu.Unlock()
	if delay > 0 {
		if f.started != nil {
			f.mu.Lock()
			select {
			case <-f.started:
			default:
				close(f.started)
			}
			f.mu.Unlock()
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			close(f.canceled)
			return nil, ctx.Err()
		}
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-fake-header", "h"))
	_ = grpc.SetTrailer(ctx, metadata.Pairs("x-fake-trailer", "t"))
	resp := &runtimeapi.VersionResponse{Version: in.GetVersion(), RuntimeName: "fake", RuntimeVersion: "1.0", RuntimeApiVersion: "v1"}
	// Field 99 is unknown to every cri-api: it must survive the relay.
	resp.ProtoReflect().SetUnknown([]byte{0x9a, 0x06, 0x02, 'o', 'k'})
	return resp, nil
}

func (f *fakeRuntime) ContainerStatus(ctx context.Context, in *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	st, _ := status.New(codes.NotFound, "container \""+in.GetContainerId()+"\" not found").
		WithDetails(&errdetails.ErrorInfo{Reason: "NOT_FOUND", Domain: "fake"})
	return nil, st.Err()
}

func (f *fakeRuntime) GetContainerEvents(_ *runtimeapi.GetEventsRequest, ss runtimeapi.RuntimeService_GetContainerEventsServer) error {
	f.record(ss.Context())
	for i := range 3 {
		if err := ss.Send(&runtimeapi.ContainerEventResponse{ContainerId: string(rune('a' + i))}); err != nil {
			return err
		}
	}
	ss.SetTrailer(metadata.Pairs("x-fake-trailer", "events"))
	return status.Error(codes.Aborted, "events end here")
}

// echo answers any method the fake does not know by sending every frame
// back as it came; it stands for a runtime newer than the compiled cri-api.
func echo(_ any, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	if err := ss.SendHeader(metadata.Pairs("x-echo-method", method)); err != nil {
		return err
	}
	for {
		var f Frame
		if err := ss.RecvMsg(&f); err != nil {
			if errors.Is(err, io.EOF) {
				ss.SetTrailer(metadata.Pairs("x-echo", "done"))
				return nil
			}
			return err
		}
		if err := ss.SendMsg(&f); err != nil {
			return err
		}
	}
}

// startFake serves a fake runtime on a unix socket in dir.
func startFake(t testing.TB, sock string, f *fakeRuntime) *grpc.Server {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(newCodec()), grpc.UnknownServiceHandler(echo),
		grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20))
	runtimeapi.RegisterRuntimeServiceServer(gs, f)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return gs
}

// proxied is crishim's proxy in front of a backend socket, with a client.
type proxied struct {
	conn    *grpc.ClientConn
	backend *Backend
	server  *Server
	sock    string
}

func startProxy(t testing.TB, backendSock string, intercept ...Method) *proxied {
	t.Helper()
	return startProxyWith(t, dialBackend(t, backendSock), ServerOptions{Intercept: intercept})
}

// dialBackend is a Backend for the runtime at sock, closed at the test's
// end (after the proxies started later, which use it).
func dialBackend(t testing.TB, sock string) *Backend {
	t.Helper()
	b, err := Dial(BackendOptions{RuntimeEndpoint: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// startProxyWith serves a proxy to backend b with opts.
func startProxyWith(t testing.TB, b *Backend, opts ServerOptions) *proxied {
	t.Helper()
	dir := t.TempDir()
	srv, err := NewServer(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "crishim.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(newCodec()), grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &proxied{conn: conn, backend: b, server: srv, sock: sock}
}

func fakeSock(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "runtime.sock")
}
