package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestFramesForAnEndedCallAreIgnored: a late frame on the stream ID of a
// call that ended counts as part of no call; such frames only give back
// the connection window.
func TestFramesForAnEndedCallAreIgnored(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)
	c := dialRaw(t, p.sock)
	answered := func(id uint32) {
		t.Helper()
		for {
			switch f := c.next(t, func(http2.Frame) bool { return true }).(type) {
			case *http2.MetaHeadersFrame:
				if f.StreamID == id && f.StreamEnded() {
					return
				}
			case *http2.RSTStreamFrame:
				t.Fatalf("stream %d reset: %v", f.StreamID, f.ErrCode)
			case *http2.GoAwayFrame:
				t.Fatalf("GOAWAY: %v %q", f.ErrCode, f.DebugData())
			}
		}
	}
	c.callVersion(t, 1)
	answered(1)
	late := func() {
		t.Helper()
		if err := c.fr.WriteData(1, false, []byte{0, 0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
		if err := c.fr.WriteWindowUpdate(1, 100); err != nil {
			t.Fatal(err)
		}
	}
	late() // on the stream of the call that just ended
	c.callVersion(t, 3)
	answered(3) // stream 1's struct now served stream 3
	late()
	c.quietUntilAck(t, "late frames on an ended call, to be ignored")
}

// quietUntilAck sends a PING and reads up to its ack: an RST_STREAM, HEADERS
// or GOAWAY before it fails the test, what naming what was to be ignored.
// The relay answers a PING after what it read before it.
func (c *rawClient) quietUntilAck(t *testing.T, what string) {
	t.Helper()
	probe := [8]byte{'q', 'u', 'i', 'e', 't'}
	if err := c.fr.WritePing(false, probe); err != nil {
		t.Fatal(err)
	}
	for {
		switch f := c.next(t, func(http2.Frame) bool { return true }).(type) {
		case *http2.PingFrame:
			if f.IsAck() && f.Data == probe {
				return
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("%s: RST_STREAM %v on stream %d reached the client", what, f.ErrCode, f.StreamID)
		case *http2.MetaHeadersFrame:
			t.Fatalf("%s: HEADERS on stream %d reached the client", what, f.StreamID)
		case *http2.GoAwayFrame:
			t.Fatalf("%s: GOAWAY %v %q", what, f.ErrCode, f.DebugData())
		}
	}
}

// scriptedRuntime is an HTTP/2 server whose answers a test writes, from its
// reader (onRequest) or from goroutines of its own (go), under one lock.
type scriptedRuntime struct {
	mu  sync.Mutex
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
	wg  sync.WaitGroup
}

// serveScripted serves sock: onRequest is called with each request's
// stream ID once the request has ended (END_STREAM), as a unary gRPC server
// answers; acked with the data of each PING ack the relay sends. Answering
// on HEADERS instead would race the client's last DATA frame, and the relay
// rightly resets a request still open when its answer ends.
func serveScripted(t *testing.T, sock string, onRequest func(rt *scriptedRuntime, id uint32), acked func([8]byte)) {
	serveUnix(t, sock, func(nc net.Conn) {
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(nc, preface); err != nil {
			return
		}
		rt := &scriptedRuntime{fr: http2.NewFramer(nc, nc)}
		rt.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		rt.enc = hpack.NewEncoder(&rt.buf)
		defer rt.wg.Wait()
		rt.do(func() { _ = rt.fr.WriteSettings() })
		for {
			f, err := rt.fr.ReadFrame()
			if err != nil {
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					rt.do(func() { _ = rt.fr.WriteSettingsAck() })
				}
			case *http2.PingFrame:
				if f.IsAck() {
					acked(f.Data)
				} else {
					rt.do(func() { _ = rt.fr.WritePing(true, f.Data) })
				}
			case *http2.MetaHeadersFrame:
				if f.StreamEnded() {
					onRequest(rt, f.StreamID)
				}
			case *http2.DataFrame:
				if f.StreamEnded() {
					onRequest(rt, f.StreamID)
				}
			}
		}
	})
}

// do writes under the lock.
func (rt *scriptedRuntime) do(write func()) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	write()
}

// TestStaleRuntimeFrameMissesACallOnAnotherConnection: a call to another
// endpoint has the same upstream stream ID there as an earlier call had on
// its own connection. A late frame from the first connection must not land
// in the second call.
func TestStaleRuntimeFrameMissesACallOnAnotherConnection(t *testing.T) {
	runtimeSock, imageSock := fakeSock(t), fakeSock(t)
	imageGot, strayed := make(chan struct{}), make(chan struct{})
	stray := [8]byte{'s', 't', 'r', 'a', 'y'}
	serveScripted(t, runtimeSock, func(rt *scriptedRuntime, id uint32) {
		rt.do(func() { answerOK(rt.fr, rt.enc, &rt.buf, id) })
		rt.wg.Go(func() {
			select {
			case <-imageGot:
			case <-time.After(hangBound):
				return
			}
			// A message on the ended stream, then a PING whose ack says
			// the relay has read it.
			rt.do(func() {
				_ = rt.fr.WriteData(id, false, NewFrame([]byte("stray")).Bytes())
				_ = rt.fr.WritePing(false, stray)
			})
		})
	}, func(data [8]byte) {
		if data == stray {
			close(strayed)
		}
	})
	serveHandler(t, imageSock, func(_ any, ss grpc.ServerStream) error {
		var f Frame
		if err := ss.RecvMsg(&f); err != nil {
			return err
		}
		close(imageGot)
		select {
		case <-strayed:
		case <-time.After(hangBound):
			return status.Error(codes.DeadlineExceeded, "the runtime's stray frame was never read")
		}
		return ss.SendMsg(NewFrame([]byte("image")))
	})
	b, err := Dial(BackendOptions{RuntimeEndpoint: "unix://" + runtimeSock, ImageEndpoint: "unix://" + imageSock})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p := startProxyWith(t, b, ServerOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	if err := p.conn.Invoke(ctx, "/runtime.v1.RuntimeService/Version", NewFrame(nil), &Frame{}); err != nil {
		t.Fatal(err)
	}
	var out Frame
	if err := p.conn.Invoke(ctx, "/runtime.v1.ImageService/ListImages", NewFrame([]byte("?")), &out); err != nil {
		t.Fatalf("the image call, with the runtime's stray frame in between: %v", err)
	}
	if string(out.Bytes()) != "image" {
		t.Fatalf("the image call answered %q, want %q", out.Bytes(), "image")
	}
}

// TestStaleRuntimeFrameMissesAnEndedStream: a late frame from the runtime
// on the stream of the call that ended last on a connection reaches no
// client.
func TestStaleRuntimeFrameMissesAnEndedStream(t *testing.T) {
	sock := fakeSock(t)
	strayed := make(chan struct{})
	stray := [8]byte{'s', 't', 'r', 'a', 'y'}
	serveScripted(t, sock, func(rt *scriptedRuntime, id uint32) {
		rt.do(func() {
			answerOK(rt.fr, rt.enc, &rt.buf, id)
			_ = rt.fr.WriteRSTStream(id, http2.ErrCodeCancel)
			_ = rt.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true,
				BlockFragment: encodeFields(rt.enc, &rt.buf, ":status", "200", "content-type", "application/grpc")})
			_ = rt.fr.WritePing(false, stray)
		})
	}, func(data [8]byte) {
		if data == stray {
			close(strayed)
		}
	})
	p := startProxy(t, sock)
	c := dialRaw(t, p.sock)
	c.callVersion(t, 1)
	c.next(t, func(f http2.Frame) bool { h, ok := f.(*http2.MetaHeadersFrame); return ok && h.StreamEnded() })
	select {
	case <-strayed:
	case <-time.After(hangBound):
		t.Fatal("the relay never acked the runtime's PING")
	}
	// The relay writes to the client before it acks the runtime: a frame
	// for stream 1 would come before this PING's ack.
	c.quietUntilAck(t, "the runtime's late frames on an ended call")
}

// inFlight is a CallObserver that counts calls in flight, as the gauge
// does, and remembers whether the count ever went below zero.
type inFlight struct {
	n      atomic.Int64
	dipped atomic.Bool
}

func (o *inFlight) Method(string) MethodObserver { return o }
func (o *inFlight) Started()                     { o.n.Add(1) }
func (o *inFlight) Ended(codes.Code, time.Duration) {
	if o.n.Add(-1) < 0 {
		o.dipped.Store(true)
	}
}

// TestInFlightCountNeverDipsBelowZero: a call is counted as started after
// the reader that started it wrote its request, and as ended after the
// other reader wrote its answer; the start must still come first.
func TestInFlightCountNeverDipsBelowZero(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	obs := &inFlight{}
	p := startProxyWith(t, dialBackend(t, sock), ServerOptions{Observe: obs})
	client := runtimeapi.NewRuntimeServiceClient(p.conn)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if _, err := client.Version(context.Background(), &runtimeapi.VersionRequest{}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if obs.dipped.Load() {
		t.Fatal("a call was counted as ended before it was counted as started")
	}
	// The last calls are counted just after their answers left.
	deadline := time.Now().Add(hangBound)
	for obs.n.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := obs.n.Load(); n != 0 {
		t.Fatalf("%d calls still in flight after all ended", n)
	}
}

// TestUpstreamOutOfStreamIDsRedials: the call that takes an upstream
// connection's last stream ID is answered on it, and the next call dials a
// new connection.
func TestUpstreamOutOfStreamIDsRedials(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)
	client := runtimeapi.NewRuntimeServiceClient(p.conn)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	if _, err := client.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
	p.server.relay.eachSession(func(s *session) { s.ups[routeRuntime].nextID = h2MaxStreamID })
	for i := range 2 {
		if _, err := client.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			t.Fatalf("call %d after the last stream ID: %v", i+1, err)
		}
	}
}
