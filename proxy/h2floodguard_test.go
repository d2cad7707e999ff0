package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/metrics"
)

// floods are connections that make crishim work without relaying anything.
var floods = map[string]func(c *rawClient){
	"PING flood": floodPings,
	"empty CONTINUATION flood": func(c *rawClient) {
		c.buf.Reset()
		_ = c.enc.WriteField(hpackField(":method", "POST"))
		_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.buf.Bytes()})
		for c.fr.WriteContinuation(1, false, nil) == nil {
		}
	},
	"rapid reset": func(c *rawClient) {
		for id := uint32(1); ; id += 2 {
			c.headers(id)
			if c.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				return
			}
		}
	},
	"SETTINGS flood": func(c *rawClient) {
		for c.fr.WriteSettings() == nil {
		}
	},
	"unknown frame flood": func(c *rawClient) {
		for c.fr.WriteRawFrame(0xfa, 0, 0, []byte("x")) == nil {
		}
	},
}

func TestFloodsAreToldToCalmDown(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)
	for name, flood := range floods {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, p.sock)
			done := make(chan struct{})
			go func() {
				defer close(done)
				flood(c)
			}()
			ga := c.expectGoAway(t, http2.ErrCodeEnhanceYourCalm)
			if name == "PING flood" && string(ga.DebugData()) != "too_many_pings" {
				t.Errorf("GOAWAY debug data %q, want too_many_pings (grpc-go's)", ga.DebugData())
			}
			c.nc.Close()
			<-done
		})
	}
}

// TestLegitimateGRPCClientIsNeverCutOff: the kubelet's client is grpc-go,
// which sends a bandwidth probe after nearly every call, and keepalive
// PINGs; some of its calls are cancelled. None of it is a flood.
func TestLegitimateGRPCClientIsNeverCutOff(t *testing.T) {
	m := metrics.New("test", "test", nil)
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxyWith(t, dialBackend(t, sock), ServerOptions{Observe: m})
	conn, err := grpc.NewClient("unix://"+p.sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(newCodec())),
		// grpc-go's shortest keepalive.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, PermitWithoutStream: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	// 2,500 calls still make 2,500 probes, past the guard's 1,000 idle frames (so a guard
	// that counted probes without the DATA between them would cut the client off).
	calls := 10000
	if testing.Short() {
		calls = 2500
	}
	for i := range calls {
		if i%50 == 0 {
			// A stream the client cancels: RST_STREAM(CANCEL).
			sctx, scancel := context.WithCancel(ctx)
			cs, err := conn.NewStream(sctx, relayDesc, "/runtime.v1.RuntimeService/Watch")
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			if err := cs.SendMsg(NewFrame([]byte("x"))); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			var f Frame
			if err := cs.RecvMsg(&f); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			scancel()
			if err := cs.RecvMsg(&f); err == nil || errors.Is(err, io.EOF) {
				t.Fatalf("call %d: cancelled stream ended with %v", i, err)
			}
			continue
		}
		// A 64 KiB answer now and then: DATA, then grpc-go's BDP probe.
		var in runtimeapi.VersionRequest
		if i%10 == 0 {
			in.Version = string(make([]byte, 64<<10))
		}
		if _, err := client.Version(ctx, &in); err != nil {
			t.Fatalf("call %d of a well-behaved client: %v", i, err)
		}
	}
	if n := testutil.CollectAndCount(m.Registry, "crishim_relay_protocol_errors_total"); n != 0 {
		t.Errorf("%d protocol error series for a well-behaved client", n)
	}
}

func hpackField(name, value string) hpack.HeaderField {
	return hpack.HeaderField{Name: name, Value: value}
}

// TestContinuationFloodCaughtAfterWholeFrames: the client's CONTINUATION
// tap follows the frames the framer reads, whole blocks and DATA first,
// and catches a block padded out with small CONTINUATIONs.
func TestContinuationFloodCaughtAfterWholeFrames(t *testing.T) {
	var out bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	_ = enc.WriteField(hpack.HeaderField{Name: ":path", Value: "/runtime.v1.RuntimeService/Version"})
	for id := uint32(1); id < 8; id += 2 {
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true})
		_ = fr.WriteData(id, true, []byte("hello"))
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 9, BlockFragment: block.Bytes()[:1]})
	for range maxSmallContinuations + 2 {
		_ = fr.WriteContinuation(9, false, nil)
	}
	got := readAll(out.Bytes())
	want := "error " + calm("too_many_continuations").Error()
	if last := got[len(got)-1]; last != want {
		t.Fatalf("frames read: %v\nlast %q, want %q", got, last, want)
	}
}

// readAll reads frames as a client's connection does until the first
// error, described.
func readAll(stream []byte) []string {
	a, b := net.Pipe()
	go func() {
		_, _ = a.Write(stream)
		_ = a.Close()
	}()
	defer b.Close()
	c := newH2conn(b, ioBufSize)
	c.tap = &continuationTap{}
	var out []string
	for {
		f, err := c.readFrame()
		if err != nil {
			return append(out, fmt.Sprintf("error %v", err))
		}
		out = append(out, fmt.Sprintf("%T %+v", f, f.Header()))
	}
}
