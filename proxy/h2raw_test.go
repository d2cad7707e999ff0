package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/metrics"
)

// rawClient speaks HTTP/2 frames to the relay, as a client grpc-go is not.
type rawClient struct {
	nc  net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

func dialRaw(t *testing.T, sock string, settings ...http2.Setting) *rawClient {
	t.Helper()
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(hangBound))
	c := &rawClient{nc: nc, fr: http2.NewFramer(nc, nc)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.buf)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return c
}

// next reads frames until one satisfies want.
func (c *rawClient) next(t *testing.T, want func(http2.Frame) bool) http2.Frame {
	t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading: %v", err)
		}
		if want(f) {
			return f
		}
	}
}

func TestRawClientPingAndSettings(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)
	// A zero header table: the relay must encode every field literally.
	c := dialRaw(t, p.sock, http2.Setting{ID: http2.SettingHeaderTableSize, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100})

	sf := c.next(t, func(f http2.Frame) bool { _, ok := f.(*http2.SettingsFrame); return ok }).(*http2.SettingsFrame)
	if sf.IsAck() {
		t.Fatal("the relay's first frame is an ack, not its SETTINGS")
	}
	if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != relayMaxStreams {
		t.Errorf("MAX_CONCURRENT_STREAMS = %d, %v", v, ok)
	}
	c.next(t, func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() })
	if err := c.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	pf := c.next(t, func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame)
	if !pf.IsAck() || pf.Data != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Errorf("PING answer %v", pf)
	}

	// A whole call in frames: the 100-byte window makes the relay send the
	// answer in pieces as we open it.
	c.callVersion(t, 1)
	var data []byte
	var trailers []hpack.HeaderField
	for trailers == nil {
		switch f := c.next(t, func(http2.Frame) bool { return true }).(type) {
		case *http2.DataFrame:
			data = append(data, f.Data()...)
			_ = c.fr.WriteWindowUpdate(1, uint32(len(f.Data())))
			_ = c.fr.WriteWindowUpdate(0, uint32(len(f.Data())))
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				trailers = f.Fields
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset: %v", f.ErrCode)
		}
	}
	if code, msg := callStatus(trailers); code != codes.OK {
		t.Fatalf("status %v %q", code, msg)
	}
	if len(data) < 5 || int(binary.BigEndian.Uint32(data[1:5])) != len(data)-5 {
		t.Fatalf("response %x is not one gRPC message", data)
	}
	var resp runtimeapi.VersionResponse
	if err := proto.Unmarshal(data[5:], &resp); err != nil || resp.RuntimeName != "fake" {
		t.Fatalf("response %v, %v", &resp, err)
	}
}

func TestMalformedFramesCloseTheConnection(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)

	cases := map[string]func(c *rawClient){
		"DATA on an idle stream": func(c *rawClient) { _ = c.fr.WriteData(7, false, []byte("x")) },
		"even stream ID":         func(c *rawClient) { c.headers(2) },
		"window overflow": func(c *rawClient) {
			_ = c.fr.WriteWindowUpdate(0, 1<<31-1)
			_ = c.fr.WriteWindowUpdate(0, 1<<31-1)
		},
		"bad HPACK": func(c *rawClient) {
			_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0xff, 0xff, 0xff, 0xff}, EndHeaders: true})
		},
		"frame too large": func(c *rawClient) { _ = c.fr.WriteData(1, false, make([]byte, 1<<20)) },
		"CONTINUATION out of place": func(c *rawClient) {
			_ = c.fr.WriteContinuation(1, true, []byte{0x82})
		},
	}
	// Errors confined to one stream are answered with RST_STREAM.
	streamCases := map[string]func(c *rawClient){
		"stream window overrun": func(c *rawClient) {
			c.headers(1)
			for range relayStreamWindow/16384 + 1 {
				_ = c.fr.WriteData(1, false, make([]byte, 16384))
			}
		},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		garbage := make([]byte, 1+rng.IntN(200))
		for j := range garbage {
			garbage[j] = byte(rng.Uint32())
		}
		cases["garbage "+string(rune('a'+i))] = func(c *rawClient) {
			_, _ = c.nc.Write(garbage)
			// Garbage may well end in the middle of a frame, which the
			// relay rightly waits for: end it.
			_ = c.nc.(*net.UnixConn).CloseWrite()
		}
	}
	for name, send := range cases {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, p.sock)
			send(c)
			// The relay may answer first (a GOAWAY, an RST); in the end it
			// must hang up, not wait or panic.
			for {
				if _, err := c.fr.ReadFrame(); err != nil {
					break
				}
			}
		})
	}
	// A runtime that takes the call and never opens its window: what the
	// client sends beyond its own window cannot have been granted.
	silentSock := fakeSock(t)
	startRaw(t, silentSock, func(int, *http2.Framer, *hpack.Encoder, *bytes.Buffer, uint32) {})
	silent := startProxy(t, silentSock)
	for name, send := range streamCases {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, silent.sock)
			go send(c)
			rst := c.next(t, func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
			if rst.ErrCode != http2.ErrCodeFlowControl {
				t.Errorf("RST_STREAM %v, want FLOW_CONTROL_ERROR", rst.ErrCode)
			}
		})
	}
	// The relay still serves well-behaved clients.
	if _, err := runtimeapi.NewRuntimeServiceClient(p.conn).Version(context.Background(), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("after the malformed clients: %v", err)
	}
}

// callVersion sends a whole Version call on stream id.
func (c *rawClient) callVersion(t *testing.T, id uint32) {
	t.Helper()
	c.buf.Reset()
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/runtime.v1.RuntimeService/Version"},
		{":authority", "localhost"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = c.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.buf.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteData(id, true, []byte{0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
}

// TestBandwidthProbeAckRidesWithTheNextFrames: grpc-go's BDP PING is
// answered behind the next frames crishim writes anyway, any other PING at
// once.
func TestBandwidthProbeAckRidesWithTheNextFrames(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)
	c := dialRaw(t, p.sock)
	c.next(t, func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() })

	other := [8]byte{'k', 'e', 'e', 'p', 'a', 'l', 'i', 'v'}
	for _, ping := range [][8]byte{grpcBDPPing, other} {
		if err := c.fr.WritePing(false, ping); err != nil {
			t.Fatal(err)
		}
	}
	var acks [][8]byte
	for len(acks) < 2 {
		pf := c.next(t, func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame)
		acks = append(acks, pf.Data)
	}
	if acks[0] != other || acks[1] != grpcBDPPing {
		t.Errorf("acks %q, want the other PING's first, then the probe's behind it", acks)
	}

	// A probe after a call's answer is acked with the next call's.
	if err := c.fr.WritePing(false, grpcBDPPing); err != nil {
		t.Fatal(err)
	}
	c.callVersion(t, 1)
	var got []string
	for len(got) == 0 || got[len(got)-1] != "ping" {
		switch f := c.next(t, func(http2.Frame) bool { return true }).(type) {
		case *http2.PingFrame:
			got = append(got, "ping")
		case *http2.MetaHeadersFrame:
			got = append(got, "headers")
		case *http2.DataFrame:
			got = append(got, "data")
		case *http2.RSTStreamFrame:
			t.Fatalf("stream reset: %v", f.ErrCode)
		}
	}
	// The answer may come in one write or several; the ack goes with the first.
	if got[0] != "headers" {
		t.Errorf("frames %v: the probe's ack went out before the answer", got)
	}
}

func (c *rawClient) headers(id uint32) {
	c.buf.Reset()
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/runtime.v1.RuntimeService/Bulk"},
		{":authority", "localhost"}, {"content-type", "application/grpc"}} {
		_ = c.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	_ = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.buf.Bytes(), EndHeaders: true})
}

func TestRelayMetricsShareTheRPCSeries(t *testing.T) {
	m := metrics.New("test", "test", MethodNames(CRIServices...))
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxyWith(t, dialBackend(t, sock), ServerOptions{Observe: m})
	client := runtimeapi.NewRuntimeServiceClient(p.conn)
	_, _ = client.Version(context.Background(), &runtimeapi.VersionRequest{})
	_, _ = client.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: "x"})
	var out Frame
	_ = p.conn.Invoke(context.Background(), "/made.up/Method", NewFrame(nil), &out)

	want := `
# HELP crishim_grpc_requests_total gRPC calls served by crishim, by full method and gRPC status code.
# TYPE crishim_grpc_requests_total counter
crishim_grpc_requests_total{code="NotFound",method="/runtime.v1.RuntimeService/ContainerStatus"} 1
crishim_grpc_requests_total{code="OK",method="/runtime.v1.RuntimeService/Version"} 1
crishim_grpc_requests_total{code="OK",method="other"} 1
`
	// A call is counted once its answer is written, which may be just
	// after the client has it.
	deadline := time.Now().Add(hangBound)
	for {
		err := testutil.GatherAndCompare(m.Registry, bytes.NewBufferString(want), "crishim_grpc_requests_total")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
