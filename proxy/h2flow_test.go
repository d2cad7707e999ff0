package proxy

import (
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

func TestSlowReaderIsHeldBackNotBuffered(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()

	// The client sends and never reads: the echoes pile up until every
	// window on the way is full, and then the client's sends block too.
	cs, err := p.conn.NewStream(ctx, relayDesc, "/runtime.v1.RuntimeService/Flood")
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan int, 1)
	go func() {
		n := 0
		for ; n < 64; n++ {
			if cs.SendMsg(NewFrame(make([]byte, 1<<20))) != nil {
				break
			}
		}
		sent <- n
	}()
	// Wait until the flood is held back both ways: the relay queues for the
	// runtime (whose window the echoes it cannot send have closed) and for
	// the client (which reads nothing).
	waitFor(t, "the flood held back both ways", func() bool {
		up, down := p.server.relay.queuedEachWay()
		return up > 0 && down > 0
	})
	held := p.server.relay.queuedBytes()
	if held > relayConnWindow {
		t.Errorf("relay holds %d bytes for a client that does not read, more than its %d-byte window", held, relayConnWindow)
	}
	cancel()
	if n := <-sent; n == 64 {
		t.Error("64 MiB went out to a peer that reads nothing: no back-pressure")
	}
}

// queuedEachWay is what the relay holds waiting for windows, toward the
// runtime and toward the client.
func (r *relay) queuedEachWay() (up, down int) {
	r.eachSession(func(s *session) {
		for st := range s.openStreams(nil) {
			up += st.toUp.queue.len()
			down += st.toClient.queue.len()
		}
	})
	return up, down
}

// queuedBytes is what the relay holds waiting for windows.
func (r *relay) queuedBytes() int {
	up, down := r.queuedEachWay()
	return up + down
}

// The relay decodes every header block of a connection into the same
// fields: trailers that wait behind DATA for the client's window must not
// become the next call's headers.
func TestTrailersWaitingForTheWindowSurviveLaterCalls(t *testing.T) {
	sock := fakeSock(t)
	serveHandler(t, sock, func(_ any, ss grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(ss)
		var in Frame
		if err := ss.RecvMsg(&in); err != nil {
			return err
		}
		size := 10
		if method == "/runtime.v1.RuntimeService/Big" {
			size = 512 << 10 // far more than the client's 64 KiB window, within crishim's
		}
		ss.SetTrailer(metadata.Pairs("x-which", method, "x-"+method[len(method)-3:], "1"))
		return ss.SendMsg(NewFrame(make([]byte, size)))
	})
	p := startProxy(t, sock)
	// Fixed windows (no bandwidth probing): the big answer must wait.
	conn, err := grpc.NewClient("unix://"+p.sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(newCodec()), grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()

	call := func(method string) grpc.ClientStream {
		cs, err := conn.NewStream(ctx, relayDesc, "/runtime.v1.RuntimeService/"+method)
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(NewFrame([]byte("x"))); err != nil {
			t.Fatal(err)
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		return cs
	}
	finish := func(cs grpc.ClientStream, method string) {
		t.Helper()
		var f Frame
		if err := cs.RecvMsg(&f); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if err := cs.RecvMsg(&f); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: end of stream: %v", method, err)
		}
		want := metadata.Pairs("x-which", "/runtime.v1.RuntimeService/"+method, "x-"+method[len(method)-3:], "1")
		got := cs.Trailer()
		for k, v := range want {
			if len(got[k]) != 1 || got[k][0] != v[0] {
				t.Errorf("%s: trailer %s = %q, want %q (all: %v)", method, k, got[k], v, got)
			}
		}
	}
	big := call("Big")
	// The big answer and its trailers are in crishim now, most of it
	// waiting; these calls' header blocks are read meanwhile.
	for range 3 {
		finish(call("Small"), "Small")
	}
	finish(big, "Big")
}
