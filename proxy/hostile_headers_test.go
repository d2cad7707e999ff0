package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Hostile header blocks: what a client can make crishim hold by what it
// puts in HEADERS and CONTINUATION frames.

// bigBlock is a header block for stream 1 of a fresh connection, a
// request's headers followed by pad bytes, cut into frames of at most
// 16 KiB: the first a HEADERS, the rest CONTINUATIONs, the last with
// END_HEADERS. The method is one crishim refuses itself (CRI v1alpha2):
// what is measured is the relay, not a runtime decoding the same block.
func bigBlock(pad []byte) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/runtime.v1alpha2.RuntimeService/Version"},
		{":authority", "localhost"}, {"content-type", "application/grpc"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	block := append(buf.Bytes(), pad...)
	var out []byte
	typ, flags := http2.FrameHeaders, http2.FlagHeadersEndStream
	for len(block) > 0 {
		n := min(len(block), h2DefaultMaxFrame)
		f := flags
		if n == len(block) {
			f |= http2.FlagHeadersEndHeaders
		}
		out = append(out, frameHeader(uint32(n), typ, f, 1)...)
		out = append(out, block[:n]...)
		block = block[n:]
		typ, flags = http2.FrameContinuation, 0
	}
	return out
}

// indexedPad is n one-byte indexed fields (static index 16,
// accept-encoding: gzip, deflate): 60 bytes of header list for each byte
// on the wire, and a field for the relay to keep for each.
func indexedPad(n int) []byte { return bytes.Repeat([]byte{0x80 | 16}, n) }

// literalPad is n bytes of header list (as RFC 9113 §6.5.2 counts it) in
// literal fields never indexed (RFC 7541 §6.2.3) with 8 KiB values: the
// list a decoder must turn into strings.
func literalPad(n int) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	value := string(bytes.Repeat([]byte{'v'}, 8<<10))
	for i, size := 0, 0; size < n; i++ {
		f := hpack.HeaderField{Name: fmt.Sprintf("x-big-%d", i), Value: value, Sensitive: true}
		_ = enc.WriteField(f)
		size += int(f.Size())
	}
	return buf.Bytes()
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// perConnHeaderBudget is what one client connection may make crishim hold
// through header blocks, on top of an idle connection's cost, as
// docs/SECURITY.md states it: the decoder's table and its buffer for a
// string split across frames, the largest field slice kept between blocks,
// the framer's one frame. What these attacks leave is far less; before the
// bound, the indexed attack alone left about 11 MB a connection, a block
// within the limit 20 KB.
const perConnHeaderBudget = 16 << 10

// TestHostileHeaderBlocksCostABoundedAmount: many connections at once send
// what made crishim hold megabytes each (a 270 KB block of one-byte indexed
// fields, a 15 MiB list of literals), then stay connected; the heap grows
// by at most a small constant per connection, whatever the count.
func TestHostileHeaderBlocksCostABoundedAmount(t *testing.T) {
	attacks := map[string][]byte{
		"indexed 270 KB": bigBlock(indexedPad(270 << 10)),
		"literal 15 MiB": bigBlock(literalPad(15 << 20)),
		// Just within the limit (static index 19, accept with no value:
		// 38 bytes of list each): the connection stays, and so would the
		// room its fields took.
		"within the limit, then idle": bigBlock(bytes.Repeat([]byte{0x80 | 19}, 420)),
	}
	for _, n := range []int{20, 100} {
		for name, block := range attacks {
			t.Run(fmt.Sprintf("%s x%d", name, n), func(t *testing.T) {
				// A relay of its own, shut down (every session gone) at the
				// subtest's end: the next one measures from a clean slate.
				sock := fakeSock(t)
				startFake(t, sock, &fakeRuntime{})
				p := startProxy(t, sock)
				var clients []*rawClient
				for range n {
					c := dialRaw(t, p.sock)
					// Its session is set up: only the block's cost is measured.
					c.next(t, func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() })
					clients = append(clients, c)
				}
				before := heapInUse()
				var wg sync.WaitGroup
				for _, c := range clients {
					wg.Go(func() {
						_, _ = c.nc.Write(block)
						// A PING after the block: its ack says the relay
						// has read the block and gone on; a GOAWAY or a
						// hang-up, that it refused it.
						var data [8]byte
						binary.BigEndian.PutUint64(data[:], 0x68656164657273) // "headers"
						_ = c.fr.WritePing(false, data)
						for {
							f, err := c.fr.ReadFrame()
							if err != nil {
								return
							}
							if pf, ok := f.(*http2.PingFrame); ok && pf.IsAck() && pf.Data == data {
								return
							}
							if _, ok := f.(*http2.GoAwayFrame); ok {
								return
							}
						}
					})
				}
				wg.Wait()
				grown := heapInUse() - before
				t.Logf("%d connections: the heap grew by %d KiB, %d bytes a connection", n, grown>>10, grown/int64(n))
				if grown > int64(n)*perConnHeaderBudget {
					t.Errorf("%d connections grew the heap by %d KiB, %d bytes each; budget %d bytes each",
						n, grown>>10, grown/int64(n), perConnHeaderBudget)
				}
				for _, c := range clients {
					c.nc.Close()
				}
			})
		}
	}
}

// TestHeaderListsOverTheLimitAreRefused: the relay advertises
// maxHeaderListSize, so a grpc-go client refuses to send more and says why;
// a runtime that answers with more fails the call with Internal, as a
// grpc-go client fails it; neither hangs.
func TestHeaderListsOverTheLimitAreRefused(t *testing.T) {
	// Over the 16 KiB limit, and far below what grpc-go takes by default.
	big := strings.Repeat("v", 20<<10)
	t.Run("request", func(t *testing.T) {
		sock := fakeSock(t)
		startFake(t, sock, &fakeRuntime{})
		p := startProxy(t, sock)
		ctx, cancel := context.WithTimeout(context.Background(), hangBound)
		defer cancel()
		// A first call, so that the client has the relay's SETTINGS.
		if _, err := runtimeapi.NewRuntimeServiceClient(p.conn).Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
			t.Fatal(err)
		}
		_, err := runtimeapi.NewRuntimeServiceClient(p.conn).Version(metadata.AppendToOutgoingContext(ctx, "x-big", big), &runtimeapi.VersionRequest{})
		if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "header list size") {
			t.Errorf("a call with %d bytes of metadata: %v, want Internal, header list size", len(big), err)
		}
	})
	t.Run("answer", func(t *testing.T) {
		sock := fakeSock(t)
		// A runtime that ignores crishim's SETTINGS_MAX_HEADER_LIST_SIZE.
		startRaw(t, sock, func(_ int, fr *http2.Framer, enc *hpack.Encoder, buf *bytes.Buffer, id uint32) {
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true,
				BlockFragment: encodeFields(enc, buf, ":status", "200", "content-type", "application/grpc")})
			// Two fields: one string over the limit is a COMPRESSION_ERROR
			// of the connection, in x/net's decoder as in crishim's.
			block := encodeFields(enc, buf, "grpc-status", "13", "grpc-message", big[:len(big)/2], "x-more", big[len(big)/2:])
			half := len(block) / 2 // Huffman-coded: under 16 KiB
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndStream: true, BlockFragment: block[:half]})
			_ = fr.WriteContinuation(id, true, block[half:])
		})
		p := startProxy(t, sock)
		ctx, cancel := context.WithTimeout(context.Background(), hangBound)
		defer cancel()
		err := p.conn.Invoke(ctx, "/runtime.v1.RuntimeService/Version", NewFrame(nil), &Frame{})
		if st := status.Convert(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "header list") {
			t.Errorf("an answer with %d bytes of trailers: %v, want Internal, header list", len(big), err)
		}
	})
}
