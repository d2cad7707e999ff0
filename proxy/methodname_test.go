package proxy

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// pathRecorder is a runtime that records the :path of every call reaching
// its transport, before its own gRPC server parses it, and answers OK.
type pathRecorder struct {
	mu    sync.Mutex
	paths []string
}

func (r *pathRecorder) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paths = append(r.paths, info.FullMethodName)
	return ctx, nil
}

func (r *pathRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.paths
	r.paths = nil
	return out
}

func startPathRecorder(t *testing.T, sock string) *pathRecorder {
	t.Helper()
	rec := &pathRecorder{}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(newCodec()), grpc.InTapHandle(rec.tap),
		grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
			var in Frame
			if err := ss.RecvMsg(&in); err != nil {
				return err
			}
			return ss.SendMsg(NewFrame(nil))
		}))
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return rec
}

// TestRoutingBySpelling sends CreateContainer, which crishim intercepts, and
// other calls under every spelling of :path a client could try. A spelling
// the runtime's gRPC server would dispatch to an intercepted method must be
// intercepted, a malformed one or an older CRI version refused, anything
// else relayed as it came.
func TestRoutingBySpelling(t *testing.T) {
	const create = "/runtime.v1.RuntimeService/CreateContainer"
	type want int
	const (
		intercepted want = iota
		relayed
		refused
	)
	tests := []struct {
		path string
		want want
		msg  string // part of the refusal's message
	}{
		{path: create, want: intercepted},
		{path: "/runtime.v1.RuntimeService/Version", want: relayed},
		// containerd 1.6's grpc-go accepts a path without its slash.
		{path: "runtime.v1.RuntimeService/CreateContainer", want: refused, msg: `malformed method name: "runtime.v1.RuntimeService/CreateContainer"`},
		{path: "runtime.v1.RuntimeService/Version", want: refused, msg: "malformed method name"},
		{path: "/", want: refused, msg: "malformed method name"},
		{path: "/runtime.v1.RuntimeService", want: refused, msg: "malformed method name"},
		{path: "x", want: refused, msg: "malformed method name"},
		{path: "/runtime.v1.RuntimeService%2FCreateContainer", want: refused, msg: "malformed method name"},
		// containerd 1.6 serves CRI v1alpha2 too.
		{path: "/runtime.v1alpha2.RuntimeService/CreateContainer", want: refused, msg: "CRI v1 only"},
		{path: "/runtime.v1alpha2.RuntimeService/Version", want: refused, msg: "v1alpha2"},
		{path: "/runtime.v1alpha2.ImageService/ListImages", want: refused, msg: "v1alpha2"},
		{path: "/runtime.v1alpha1.RuntimeService/CreateContainer", want: refused, msg: "CRI v1 only"},
		// A newer CRI is relayed, like newer methods (forward_test.go).
		{path: "/runtime.v2.RuntimeService/CreateContainer", want: relayed},
		// grpc-go takes the service up to the last slash, after one leading
		// slash, and matches service and method exactly: none of these
		// reaches CreateContainer in the runtime, so they go as they came.
		{path: "/" + create, want: relayed},
		{path: create + "/", want: relayed},
		{path: "/runtime.v1.RuntimeService//CreateContainer", want: relayed},
		{path: "/x" + create, want: relayed},
		{path: "/runtime.v1.RuntimeService/createcontainer", want: relayed},
		{path: "/RUNTIME.V1.RUNTIMESERVICE/CreateContainer", want: relayed},
		{path: "/runtime.v1.RuntimeService/Create%43ontainer", want: relayed},
		{path: create + "?x=1", want: relayed},
		{path: create + "%00", want: relayed},
		{path: create + " ", want: relayed},
	}
	sock := fakeSock(t)
	rec := startPathRecorder(t, sock)
	var mu sync.Mutex
	creates := 0
	p := startProxy(t, sock, Unary(create, func(context.Context, *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		creates++
		return &runtimeapi.CreateContainerResponse{ContainerId: "from-crishim"}, nil
	}))
	for _, tt := range tests {
		var out Frame
		err := p.conn.Invoke(context.Background(), tt.path, NewFrame(nil), &out)
		reached := rec.take()
		mu.Lock()
		local := creates
		creates = 0
		mu.Unlock()
		switch tt.want {
		case intercepted:
			if err != nil || local != 1 || len(reached) != 0 {
				t.Errorf("%q: err %v, crishim's handler ran %d times, the runtime saw %q; want it intercepted", tt.path, err, local, reached)
			}
		case relayed:
			if err != nil || local != 0 || len(reached) != 1 || reached[0] != tt.path {
				t.Errorf("%q: err %v, crishim's handler ran %d times, the runtime saw %q; want it relayed as it came", tt.path, err, local, reached)
			}
		case refused:
			st := status.Convert(err)
			if st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), tt.msg) || local != 0 || len(reached) != 0 {
				t.Errorf("%q: %v, crishim's handler ran %d times, the runtime saw %q; want Unimplemented with %q and nothing run", tt.path, err, local, reached, tt.msg)
			}
		}
	}
}
