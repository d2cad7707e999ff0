package proxy

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const versionMethod = "/runtime.v1.RuntimeService/Version"

// renameRuntime is a rewrite that changes the answer only when asked to by
// the request's echo ("rename"), so one test sees both ways.
func renameRuntime(calls *atomic.Int32) Rewrite {
	return func(msg []byte) []byte {
		calls.Add(1)
		var resp runtimeapi.VersionResponse
		if err := proto.Unmarshal(msg, &resp); err != nil || !strings.HasPrefix(resp.Version, "rename") {
			return msg
		}
		resp.RuntimeName = "fake+rewritten"
		out, err := proto.Marshal(&resp)
		if err != nil {
			return msg
		}
		return out
	}
}

func TestRewriteResponseAmendsTheAnswerAndKeepsTheRest(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	var calls atomic.Int32
	p := startProxy(t, sock, RewriteResponse(versionMethod, renameRuntime(&calls)))

	for _, tc := range []struct {
		version string
		want    string
	}{
		{"v1", "fake"},
		{"rename", "fake+rewritten"},
		// Many DATA frames, and more than the client's stream window:
		// the held message must not hold up flow control.
		{"rename" + strings.Repeat("x", 3<<20), "fake+rewritten"},
		{"v1" + strings.Repeat("x", 3<<20), "fake"},
	} {
		req, err := proto.Marshal(&runtimeapi.VersionRequest{Version: tc.version})
		if err != nil {
			t.Fatal(err)
		}
		var out Frame
		var header, trailer metadata.MD
		if err := p.conn.Invoke(context.Background(), versionMethod, NewFrame(req), &out,
			grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
			t.Fatalf("%.10s: %v", tc.version, err)
		}
		var resp runtimeapi.VersionResponse
		if err := proto.Unmarshal(out.Bytes(), &resp); err != nil {
			t.Fatal(err)
		}
		if resp.RuntimeName != tc.want || resp.Version != tc.version {
			t.Errorf("%.10s: runtime name %q, version of %d bytes; want %q, %d bytes", tc.version, resp.RuntimeName, len(resp.Version), tc.want, len(tc.version))
		}
		if got := resp.ProtoReflect().GetUnknown(); !bytes.Equal(got, []byte{0x9a, 0x06, 0x02, 'o', 'k'}) {
			t.Errorf("%.10s: unknown fields %x lost", tc.version, got)
		}
		if got := header.Get("x-fake-header"); len(got) != 1 {
			t.Errorf("%.10s: header x-fake-header = %q", tc.version, got)
		}
		if got := trailer.Get("x-fake-trailer"); len(got) != 1 {
			t.Errorf("%.10s: trailer x-fake-trailer = %q", tc.version, got)
		}
	}
	if got := calls.Load(); got != 4 {
		t.Errorf("the rewrite ran %d times, want once per answer (4)", got)
	}
}

func TestRewriteResponseLeavesErrorsAndOtherMethodsAlone(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	var calls atomic.Int32
	rw := func(msg []byte) []byte { calls.Add(1); return append(msg, 0x9a, 0x06, 0x00) }
	p := startProxy(t, sock, RewriteResponse("/runtime.v1.RuntimeService/ContainerStatus", rw))
	client := runtimeapi.NewRuntimeServiceClient(p.conn)

	// The runtime's error answer has no message to rewrite.
	_, err := client.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: "x"})
	if st := status.Convert(err); st.Code() != codes.NotFound || len(st.Details()) != 1 {
		t.Errorf("ContainerStatus: %v (details %v), want the runtime's NotFound with its details", err, st.Details())
	}
	if _, err := client.Version(context.Background(), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := calls.Load(); got != 0 {
		t.Errorf("the rewrite ran %d times, want 0", got)
	}
}

func TestRewriteResponseIsNotServedLocally(t *testing.T) {
	descs, err := serviceDescs([]Method{RewriteResponse(versionMethod, func(b []byte) []byte { return b })})
	if err != nil || len(descs) != 0 {
		t.Errorf("serviceDescs = %v, %v; a rewritten method must stay relayed", descs, err)
	}
	_, err = serviceDescs([]Method{
		RewriteResponse(versionMethod, func(b []byte) []byte { return b }),
		Unary(versionMethod, func(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
			return nil, nil
		}),
	})
	if err == nil {
		t.Error("a method both rewritten and intercepted: no error")
	}
}
