package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// hangBound turns a deadlock into a failure; it measures nothing.
const hangBound = 60 * time.Second

func TestLargeMessagesBothWaysAndManyAtOnce(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()

	big := bytes.Repeat([]byte("0123456789abcdef"), 15<<20/16)
	var out Frame
	if err := p.conn.Invoke(ctx, "/runtime.v1.RuntimeService/Bulk", NewFrame(big), &out); err != nil {
		t.Fatalf("15 MiB echo: %v", err)
	}
	if !bytes.Equal(out.Bytes(), big) {
		t.Fatal("15 MiB echo came back different")
	}

	// Streams whose messages exceed every window, all at once (12 of
	// 3 MiB against 1 MiB stream and 16 MiB connection windows): the
	// relay must interleave them without deadlock. One message each is
	// enough for that, and keeps the test's volume (it runs under -race
	// beside the e2e suites) to what it proves.
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- echoStream(ctx, p.conn, bytes.Repeat([]byte{byte(i)}, 3<<20+i), 1)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// echoStream sends n messages on a bidi stream of an unknown method,
// reading each echo back before the next.
func echoStream(ctx context.Context, conn *grpc.ClientConn, msg []byte, n int) error {
	cs, err := conn.NewStream(ctx, relayDesc, "/runtime.v1.RuntimeService/BigStream")
	if err != nil {
		return err
	}
	for range n {
		if err := cs.SendMsg(NewFrame(msg)); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		var f Frame
		if err := cs.RecvMsg(&f); err != nil {
			return fmt.Errorf("recv: %w", err)
		}
		if !bytes.Equal(f.Bytes(), msg) {
			return errors.New("echo differs")
		}
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	var f Frame
	if err := cs.RecvMsg(&f); !errors.Is(err, io.EOF) {
		return fmt.Errorf("end of stream: %v", err)
	}
	return nil
}

// eachSession calls f with every session of the relay, under the relay's
// lock and the session's own.
func (r *relay) eachSession(f func(*session)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s := range r.sessions {
		s.mu.Lock()
		f(s)
		s.mu.Unlock()
	}
}

func TestClientStreamingAndBidi(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()

	// Client streaming: all sends first, then all echoes.
	cs, err := p.conn.NewStream(ctx, relayDesc, "/runtime.v1.RuntimeService/Upload")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if err := cs.SendMsg(NewFrame([]byte(fmt.Sprintf("chunk %d", i)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		var f Frame
		if err := cs.RecvMsg(&f); err != nil {
			t.Fatalf("echo %d: %v", i, err)
		}
		if string(f.Bytes()) != fmt.Sprintf("chunk %d", i) {
			t.Fatalf("echo %d = %q", i, f.Bytes())
		}
	}
	var f Frame
	if err := cs.RecvMsg(&f); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
	if got := cs.Trailer().Get("x-echo"); len(got) != 1 {
		t.Errorf("trailer %v", cs.Trailer())
	}
	// Bidi, message by message.
	if err := echoStream(ctx, p.conn, []byte("ping"), 50); err != nil {
		t.Fatal(err)
	}
}

// cancelSeen is a runtime whose unknown methods wait for the client and
// report its cancellation.
func cancelSeen(seen chan<- struct{}) grpc.StreamHandler {
	return func(_ any, ss grpc.ServerStream) error {
		var f Frame
		if err := ss.RecvMsg(&f); err != nil {
			return err
		}
		if err := ss.SendMsg(&f); err != nil {
			return err
		}
		<-ss.Context().Done()
		seen <- struct{}{}
		return ss.Context().Err()
	}
}

func TestStreamCancelReachesRuntime(t *testing.T) {
	sock := fakeSock(t)
	seen := make(chan struct{}, 1)
	serveHandler(t, sock, cancelSeen(seen))
	p := startProxy(t, sock)

	ctx, cancel := context.WithCancel(context.Background())
	cs, err := p.conn.NewStream(ctx, relayDesc, "/runtime.v1.RuntimeService/Watch")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(NewFrame([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	var f Frame
	if err := cs.RecvMsg(&f); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-seen:
	case <-time.After(hangBound):
		t.Fatal("the runtime never saw the client cancel the stream")
	}
}

func serveHandler(t *testing.T, sock string, h grpc.StreamHandler) *grpc.Server {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(newCodec()), grpc.UnknownServiceHandler(h))
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return gs
}

// rawRuntime is an HTTP/2 server that answers each new stream the way a
// test tells it to; it shows the relay frames grpc-go never sends.
type rawRuntime struct {
	mu      sync.Mutex
	conns   int
	goAways chan http2.ErrCode // the codes of the GOAWAYs from the relay
}

// firstGoAway waits for the first GOAWAY the relay sends the runtime: the
// relay's client may see the call fail before the runtime has read it.
func (rr *rawRuntime) firstGoAway(t *testing.T) http2.ErrCode {
	t.Helper()
	select {
	case code := <-rr.goAways:
		return code
	case <-time.After(hangBound):
		t.Fatal("the runtime got no GOAWAY")
		return 0
	}
}

type rawReply func(conn int, fr *http2.Framer, enc *hpack.Encoder, buf *bytes.Buffer, id uint32)

func startRaw(t *testing.T, sock string, reply rawReply) *rawRuntime {
	t.Helper()
	rr := &rawRuntime{goAways: make(chan http2.ErrCode, 16)}
	serveUnix(t, sock, func(nc net.Conn) {
		rr.mu.Lock()
		n := rr.conns
		rr.conns++
		rr.mu.Unlock()
		rr.serve(nc, n, reply)
	})
	return rr
}

// serveUnix calls handle on a goroutine for each connection accepted on
// sock, and closes the connection after; the test's end stops it all.
func serveUnix(t *testing.T, sock string, handle func(nc net.Conn)) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer nc.Close()
				handle(nc)
			})
		}
	})
}

func (rr *rawRuntime) serve(nc net.Conn, n int, reply rawReply) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(nc, preface); err != nil {
		return
	}
	fr := http2.NewFramer(nc, nc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	_ = fr.WriteSettings()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			reply(n, fr, enc, &buf, f.StreamID)
		case *http2.GoAwayFrame:
			select {
			case rr.goAways <- f.ErrCode:
			default: // a test reads the first few; more are not held
			}
		}
	}
}

func encodeFields(enc *hpack.Encoder, buf *bytes.Buffer, kv ...string) []byte {
	buf.Reset()
	for i := 0; i < len(kv); i += 2 {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return bytes.Clone(buf.Bytes())
}

// answerOK writes a whole successful gRPC response with an empty message.
func answerOK(fr *http2.Framer, enc *hpack.Encoder, buf *bytes.Buffer, id uint32) {
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true,
		BlockFragment: encodeFields(enc, buf, ":status", "200", "content-type", "application/grpc")})
	_ = fr.WriteData(id, false, []byte{0, 0, 0, 0, 0})
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, EndStream: true,
		BlockFragment: encodeFields(enc, buf, "grpc-status", "0")})
}

func TestRuntimeResetReachesClient(t *testing.T) {
	sock := fakeSock(t)
	startRaw(t, sock, func(_ int, fr *http2.Framer, _ *hpack.Encoder, _ *bytes.Buffer, id uint32) {
		_ = fr.WriteRSTStream(id, http2.ErrCodeInternal)
	})
	p := startProxy(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	err := p.conn.Invoke(ctx, "/runtime.v1.RuntimeService/Version", NewFrame(nil), &Frame{})
	// What grpc-go makes of RST_STREAM(INTERNAL_ERROR) from the runtime itself.
	if status.Code(err) != codes.Internal {
		t.Fatalf("runtime reset the stream: %v, want Internal", err)
	}
}

func TestRuntimeGoAwayRefusesAndRedials(t *testing.T) {
	sock := fakeSock(t)
	// The runtime goes away on the first call it is sent, on whichever
	// connection that is (the backend's own gRPC connection sends none),
	// without taking it; it answers every later one.
	var mu sync.Mutex
	var goneAway bool
	var callConns []int // the connection of each call the runtime saw
	startRaw(t, sock, func(conn int, fr *http2.Framer, enc *hpack.Encoder, buf *bytes.Buffer, id uint32) {
		mu.Lock()
		callConns = append(callConns, conn)
		first := !goneAway
		goneAway = true
		mu.Unlock()
		if first {
			_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
			return
		}
		answerOK(fr, enc, buf, id)
	})
	p := startProxy(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	// REFUSED_STREAM makes the client retry, and the retry dials afresh.
	if err := p.conn.Invoke(ctx, "/runtime.v1.RuntimeService/Version", NewFrame(nil), &Frame{}); err != nil {
		t.Fatalf("call across a GOAWAY: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(callConns) != 2 || callConns[0] == callConns[1] {
		t.Errorf("the runtime saw the call on connections %v, want once on the one that went away and once on a new one", callConns)
	}
}

func TestRuntimeRestartUnderTraffic(t *testing.T) {
	sock := fakeSock(t)
	gs := startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)
	client := runtimeapi.NewRuntimeServiceClient(p.conn)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, unavailable int
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := client.Version(ctx, &runtimeapi.VersionRequest{})
				mu.Lock()
				switch status.Code(err) {
				case codes.OK:
					ok++
				case codes.Unavailable:
					unavailable++
				default:
					t.Errorf("during restart: %v", err)
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(100 * time.Millisecond)
	gs.GracefulStop() // GOAWAY, in-flight calls finish
	startFake(t, sock, &fakeRuntime{})
	deadline := time.Now().Add(hangBound)
	for {
		if _, err := client.Version(ctx, &runtimeapi.VersionRequest{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no recovery after the runtime restarted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if ok == 0 {
		t.Error("no call succeeded")
	}
	t.Logf("%d calls OK, %d Unavailable during the restart", ok, unavailable)
}

func TestRuntimeAbsentAnswersUnavailableWithReason(t *testing.T) {
	sock := fakeSock(t)
	p := startProxy(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	for range 3 { // the first dial, then the backoff's quick answers
		_, err := runtimeapi.NewRuntimeServiceClient(p.conn).Version(ctx, &runtimeapi.VersionRequest{})
		st := status.Convert(err)
		if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), sock) {
			t.Fatalf("runtime absent: %v, want Unavailable naming %s", err, sock)
		}
	}
}

func TestManyConcurrentSmallCalls(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)
	client := runtimeapi.NewRuntimeServiceClient(p.conn)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 500)
	for i := range 500 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := client.Version(ctx, &runtimeapi.VersionRequest{Version: fmt.Sprint(i)})
			if err == nil && v.Version != fmt.Sprint(i) {
				err = fmt.Errorf("call %d got the answer to %s", i, v.Version)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestImageCallsAreRelayedToTheImageEndpoint(t *testing.T) {
	runtimeSock, imageSock := fakeSock(t), fakeSock(t)
	tag := func(name string) grpc.StreamHandler {
		return func(_ any, ss grpc.ServerStream) error {
			var f Frame
			if err := ss.RecvMsg(&f); err != nil {
				return err
			}
			return ss.SendMsg(NewFrame([]byte(name)))
		}
	}
	serveHandler(t, runtimeSock, tag("runtime"))
	serveHandler(t, imageSock, tag("image"))
	b, err := Dial(BackendOptions{RuntimeEndpoint: "unix://" + runtimeSock, ImageEndpoint: "unix://" + imageSock})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := startProxyWith(t, b, ServerOptions{})
	for method, want := range map[string]string{
		"/runtime.v1.ImageService/ListImages":      "image",
		"/runtime.v1.ImageService/FutureImageCall": "image",
		"/runtime.v1.RuntimeService/Version":       "runtime",
		"/runtime.v2.SomethingElse/Call":           "runtime",
	} {
		var out Frame
		if err := p.conn.Invoke(context.Background(), method, NewFrame([]byte("?")), &out); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if string(out.Bytes()) != want {
			t.Errorf("%s reached the %s endpoint, want %s", method, out.Bytes(), want)
		}
	}
}

func TestMetadataOfInterceptedCallsReachesHandler(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	got := make(chan metadata.MD, 1)
	version := Unary("/runtime.v1.RuntimeService/Version", func(ctx context.Context, in *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		got <- md
		return &runtimeapi.VersionResponse{RuntimeName: "local"}, nil
	})
	p := startProxy(t, sock, version)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-1-2-01")
	v, err := runtimeapi.NewRuntimeServiceClient(p.conn).Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil || v.RuntimeName != "local" {
		t.Fatalf("intercepted call: %v %v", v, err)
	}
	if md := <-got; len(md.Get("traceparent")) != 1 {
		t.Errorf("handler saw metadata %v", md)
	}
}
