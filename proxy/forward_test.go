package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestPassThroughKeepsHeadersTrailersAndUnknownFields(t *testing.T) {
	sock := fakeSock(t)
	f := &fakeRuntime{}
	startFake(t, sock, f)
	p := startProxy(t, sock)

	// A VersionRequest carrying field 77, unknown to the compiled cri-api.
	req, err := proto.Marshal(&runtimeapi.VersionRequest{Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	unknown := []byte{0xea, 0x04, 0x03, 'n', 'e', 'w'}
	req = append(req, unknown...)
	var out Frame
	var header, trailer metadata.MD
	if err := p.conn.Invoke(context.Background(), "/runtime.v1.RuntimeService/Version", NewFrame(req), &out,
		grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if got := f.lastUnknown; !bytes.Equal(got, unknown) {
		t.Errorf("runtime saw unknown fields %x, want %x", got, unknown)
	}
	var resp runtimeapi.VersionResponse
	if err := proto.Unmarshal(out.Bytes(), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.RuntimeName != "fake" || resp.Version != "v1" {
		t.Errorf("response %v", &resp)
	}
	if got := resp.ProtoReflect().GetUnknown(); !bytes.Equal(got, []byte{0x9a, 0x06, 0x02, 'o', 'k'}) {
		t.Errorf("response unknown fields %x lost in the relay", got)
	}
	if got := header.Get("x-fake-header"); len(got) != 1 || got[0] != "h" {
		t.Errorf("header x-fake-header = %q", got)
	}
	if got := trailer.Get("x-fake-trailer"); len(got) != 1 || got[0] != "t" {
		t.Errorf("trailer x-fake-trailer = %q", got)
	}
}

func TestMethodUnknownToCompiledAPIIsForwardedIntact(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)

	for _, method := range []string{
		"/runtime.v1.RuntimeService/MethodFromTheFuture",
		"/runtime.v1.ImageService/PullImageFaster",
		"/runtime.v2.Future/Anything",
	} {
		t.Run(method, func(t *testing.T) {
			// Not even valid protobuf: the relay must not look inside.
			payload := []byte("\xff\x00 raw bytes, not a message \x01")
			var out Frame
			var header metadata.MD
			if err := p.conn.Invoke(context.Background(), method, NewFrame(payload), &out, grpc.Header(&header)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), payload) {
				t.Errorf("echo = %q, want %q", out.Bytes(), payload)
			}
			if got := header.Get("x-echo-method"); len(got) != 1 || got[0] != method {
				t.Errorf("runtime saw method %q", got)
			}
		})
	}
}

func TestBidiStreamOfUnknownMethod(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)

	cs, err := p.conn.NewStream(context.Background(), relayDesc, "/runtime.v1.RuntimeService/StreamFromTheFuture")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		msg := []byte(strings.Repeat("x", i+1))
		if err := cs.SendMsg(NewFrame(msg)); err != nil {
			t.Fatal(err)
		}
		var f Frame
		if err := cs.RecvMsg(&f); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.Bytes(), msg) {
			t.Fatalf("round %d: got %q", i, f.Bytes())
		}
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var f Frame
	if err := cs.RecvMsg(&f); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want EOF", err)
	}
	if got := cs.Trailer().Get("x-echo"); len(got) != 1 || got[0] != "done" {
		t.Errorf("trailer x-echo = %q", got)
	}
}

func TestMetadataAndDeadlineReachRuntime(t *testing.T) {
	sock := fakeSock(t)
	f := &fakeRuntime{}
	startFake(t, sock, f)
	p := startProxy(t, sock)

	ctx, cancel := context.WithTimeout(context.Background(), 42*time.Second)
	defer cancel()
	want, _ := ctx.Deadline()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if _, err := runtimeapi.NewRuntimeServiceClient(p.conn).Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := f.lastMD.Get("traceparent"); len(got) != 1 || !strings.HasPrefix(got[0], "00-0af765") {
		t.Errorf("runtime saw traceparent %q", got)
	}
	if f.lastDeadline.IsZero() {
		t.Fatal("runtime saw no deadline")
	}
	// The deadline travels as a relative timeout and is rebased on arrival,
	// so it is only close to the client's, not equal.
	if d := want.Sub(f.lastDeadline).Abs(); d > 5*time.Second {
		t.Errorf("runtime deadline %v, client deadline %v", f.lastDeadline, want)
	}
}

func TestRuntimeStatusComesBackUnchanged(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)

	_, err := runtimeapi.NewRuntimeServiceClient(p.conn).ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: "nope"})
	st := status.Convert(err)
	if st.Code() != codes.NotFound || st.Message() != `container "nope" not found` {
		t.Fatalf("got %v %q", st.Code(), st.Message())
	}
	if len(st.Details()) != 1 {
		t.Fatalf("details %v", st.Details())
	}
	if info, ok := st.Details()[0].(*errdetails.ErrorInfo); !ok || info.Reason != "NOT_FOUND" {
		t.Errorf("detail %v", st.Details()[0])
	}
}

func TestServerStreamingIsRelayed(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)

	stream, err := runtimeapi.NewRuntimeServiceClient(p.conn).GetContainerEvents(context.Background(), &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for {
		ev, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.Aborted || status.Convert(err).Message() != "events end here" {
				t.Errorf("end of stream: %v", err)
			}
			break
		}
		ids = append(ids, ev.ContainerId)
	}
	if strings.Join(ids, ",") != "a,b,c" {
		t.Errorf("events %v", ids)
	}
	if got := stream.Trailer().Get("x-fake-trailer"); len(got) != 1 || got[0] != "events" {
		t.Errorf("trailer %q", got)
	}
}

func TestClientCancelReachesRuntime(t *testing.T) {
	sock := fakeSock(t)
	f := &fakeRuntime{delay: time.Hour, canceled: make(chan struct{}), started: make(chan struct{})}
	startFake(t, sock, f)
	p := startProxy(t, sock)

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := runtimeapi.NewRuntimeServiceClient(p.conn).Version(ctx, &runtimeapi.VersionRequest{})
		errc <- err
	}()
	<-f.started // the call reached the runtime: the cancellation must follow it there
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Errorf("client got %v", err)
	}
	select {
	case <-f.canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("runtime never saw the cancellation")
	}
}

func TestMessageSizeLimitIsTheKubelets(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)

	const method = "/runtime.v1.RuntimeService/Bulk"
	big := bytes.Repeat([]byte{7}, DefaultMaxMessageSize-1024)
	var out Frame
	if err := p.conn.Invoke(context.Background(), method, NewFrame(big), &out); err != nil {
		t.Fatalf("message just under 16 MiB: %v", err)
	}
	if len(out.Bytes()) != len(big) {
		t.Errorf("echoed %d bytes, want %d", len(out.Bytes()), len(big))
	}
	tooBig := bytes.Repeat([]byte{7}, DefaultMaxMessageSize+1)
	err := p.conn.Invoke(context.Background(), method, NewFrame(tooBig), &out)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("message over 16 MiB: %v, want ResourceExhausted", err)
	}
}

func TestRuntimeDownIsUnavailableThenRecovers(t *testing.T) {
	sock := fakeSock(t)
	p := startProxy(t, sock) // nothing listens on sock yet
	client := runtimeapi.NewRuntimeServiceClient(p.conn)

	// The bound only keeps a hang from passing as Unavailable: crishim
	// must answer before it with Unavailable, not DeadlineExceeded.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := client.Version(ctx, &runtimeapi.VersionRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("runtime absent: %v, want Unavailable", err)
	}
	if err := p.backend.Ready(ctx); err == nil {
		t.Fatal("Ready with the runtime absent")
	}

	startFake(t, sock, &fakeRuntime{})
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := client.Version(ctx, &runtimeapi.VersionRequest{})
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("after the runtime came up: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Ready goes through the backend's own gRPC connection, which
	// redials on its own backoff (at most 2 s): it may lag the relay.
	for {
		err := p.backend.Ready(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ready after recovery: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestInterceptedMethodIsDecodedOthersStillRelayed(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	var p *proxied
	version := Unary("/runtime.v1.RuntimeService/Version", func(ctx context.Context, in *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
		resp, err := runtimeapi.NewRuntimeServiceClient(p.backend.RuntimeConn()).Version(ctx, in)
		if err != nil {
			return nil, err
		}
		resp.RuntimeName += "+intercepted"
		return resp, nil
	})
	p = startProxy(t, sock, version)
	client := runtimeapi.NewRuntimeServiceClient(p.conn)

	v, err := client.Version(context.Background(), &runtimeapi.VersionRequest{})
	if err != nil || v.RuntimeName != "fake+intercepted" {
		t.Fatalf("intercepted Version: %v, %v", v, err)
	}
	// Registering Version must not turn the rest of RuntimeService into Unimplemented.
	_, err = client.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: "x"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("ContainerStatus beside an intercepted method: %v, want the runtime's NotFound", err)
	}
}

func TestServiceDescsRejectsBadMethods(t *testing.T) {
	noop := func(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
		return nil, nil
	}
	for _, methods := range [][]Method{
		{Unary("Version", noop)},
		{Unary("/runtime.v1.RuntimeService/", noop)},
		{Unary("/runtime.v1.RuntimeService/Version", noop), Unary("/runtime.v1.RuntimeService/Version", noop)},
	} {
		if _, err := serviceDescs(methods); err == nil {
			t.Errorf("serviceDescs(%s) accepted", methods[0].FullMethod)
		}
	}
}

func TestShutdownLetsInFlightCallsFinishThenEndsStreams(t *testing.T) {
	sock := fakeSock(t)
	f := &fakeRuntime{delay: 300 * time.Millisecond, started: make(chan struct{})}
	startFake(t, sock, f)
	p := startProxy(t, sock)
	client := runtimeapi.NewRuntimeServiceClient(p.conn)

	// A stream that would never end by itself: an unknown bidi method.
	cs, err := p.conn.NewStream(context.Background(), relayDesc, "/runtime.v1.RuntimeService/Forever")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(NewFrame([]byte("hi"))); err != nil {
		t.Fatal(err)
	}
	var f0 Frame
	if err := cs.RecvMsg(&f0); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := client.Version(context.Background(), &runtimeapi.VersionRequest{})
		errc <- err
	}()
	<-f.started // in flight: the runtime holds it for its delay
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	p.server.Shutdown(ctx)
	if err := <-errc; err != nil {
		t.Errorf("in-flight call during shutdown: %v", err)
	}
	if err := cs.RecvMsg(&f0); err == nil {
		t.Error("stream still open after shutdown")
	}
}

func TestImageCallsGoToTheImageEndpoint(t *testing.T) {
	runtimeSock, imageSock := fakeSock(t), fakeSock(t)
	startFake(t, runtimeSock, &fakeRuntime{})
	startFake(t, imageSock, &fakeRuntime{})
	b, err := Dial(BackendOptions{RuntimeEndpoint: "unix://" + runtimeSock, ImageEndpoint: "unix://" + imageSock})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for method, want := range map[string]*grpc.ClientConn{
		"/runtime.v1.ImageService/ListImages":         b.ImageConn(),
		"/runtime.v1.ImageService/FutureImageCall":    b.ImageConn(),
		"/runtime.v1.RuntimeService/Version":          b.RuntimeConn(),
		"/runtime.v2.SomethingElse/Call":              b.RuntimeConn(),
		"/containerd.services.version.v1.Version/Get": b.RuntimeConn(),
	} {
		if got := b.connFor(method); got != want {
			t.Errorf("%s routed to %s", method, got.Target())
		}
	}
	if b.ImageConn() == b.RuntimeConn() {
		t.Fatal("one connection for two endpoints")
	}
}

func TestWatchReportsAConnectionAlreadyUp(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	b, err := Dial(BackendOptions{RuntimeEndpoint: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ups := make(chan bool, 4)
	done := make(chan struct{})
	go func() {
		b.Watch(ctx, func(_ string, up bool) { ups <- up })
		close(done)
	}()
	if up := <-ups; !up {
		t.Error("first report of a connection that is up: down")
	}
	cancel()
	<-done
}
