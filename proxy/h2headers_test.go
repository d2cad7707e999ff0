package proxy

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The relay checks header blocks as the framer's ReadMetaHeaders did: a bad
// field or pseudo-header resets its stream and the connection goes on, a
// block far over the size limit ends the connection, and a block split
// anywhere over CONTINUATIONs is the same block.
func TestHeaderBlocksAreCheckedAsTheFramerDid(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)
	request := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/runtime.v1.RuntimeService/Version"},
		{":authority", "localhost"}, {"content-type", "application/grpc"}, {"te", "trailers"}}
	with := func(extra ...[2]string) [][2]string { return append(slices.Clone(request), extra...) }
	bad := map[string][][2]string{
		"upper-case name":           with([2]string{"X-Upper", "v"}),
		"name not a token":          with([2]string{"x y", "v"}),
		"NUL in a value":            with([2]string{"x-v", "a\x00b"}),
		"pseudo-header after":       with([2]string{":method", "GET"})[1:],
		"unknown pseudo-header":     append([][2]string{{":foo", "x"}}, request...),
		"repeated pseudo-header":    append([][2]string{{":path", "/x"}}, request...),
		"request and response both": append([][2]string{{":status", "200"}}, request...),
	}
	for name, fields := range bad {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, p.sock)
			c.writeBlock(t, 1, fields, 1<<14)
			rst := c.next(t, func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
			if rst.StreamID != 1 || rst.ErrCode != http2.ErrCodeProtocol {
				t.Errorf("got RST_STREAM %d %v, want 1 PROTOCOL_ERROR", rst.StreamID, rst.ErrCode)
			}
			// The connection serves on, its HPACK state intact.
			c.writeBlock(t, 3, request, 1<<14)
			c.expectAnswer(t, 3)
		})
	}
	t.Run("split anywhere", func(t *testing.T) {
		c := dialRaw(t, p.sock)
		long := with([2]string{"x-long", strings.Repeat("v", 3000)})
		for i, split := range []int{1000, 1001, 1500, 2999, 1 << 14} {
			id := uint32(1 + 2*i)
			c.writeBlock(t, id, long, split)
			c.expectAnswer(t, id)
		}
	})
	t.Run("far over the size limit", func(t *testing.T) {
		c := dialRaw(t, p.sock)
		c.buf.Reset()
		for _, kv := range request {
			_ = c.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
		}
		// Literals without Huffman coding, in fields of 8 KiB (a few big
		// ones would cost the decoder a copy per fragment, which takes
		// long under the race detector), over the whole list limit.
		value := strings.Repeat("v", 8<<10)
		for range 4 * maxHeaderListSize / len(value) {
			c.buf.WriteByte(0) // literal without indexing, new name
			c.buf.Write(hpackString("x-big"))
			c.buf.Write(hpackString(value))
		}
		go c.writeRaw(1, c.buf.Bytes(), 1<<14)
		c.expectGoAway(t, http2.ErrCodeProtocol)
	})
	t.Run("just over the size limit", func(t *testing.T) {
		// As grpc-go's server answers it: RST_STREAM(FRAME_SIZE_ERROR),
		// and the connection serves on.
		c := dialRaw(t, p.sock)
		c.writeBlock(t, 1, with([2]string{"x-big", strings.Repeat("v", maxHeaderListSize)}), 1<<14)
		rst := c.next(t, func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
		if rst.StreamID != 1 || rst.ErrCode != http2.ErrCodeFrameSize {
			t.Errorf("got RST_STREAM %d %v, want 1 FRAME_SIZE_ERROR", rst.StreamID, rst.ErrCode)
		}
		c.writeBlock(t, 3, request, 1<<14)
		c.expectAnswer(t, 3)
	})
}

// TestHeaderReaderKeepsLittleAfterABigBlock: the room a big block's fields
// took is not kept for the connection's life, on either side of the relay.
func TestHeaderReaderKeepsLittleAfterABigBlock(t *testing.T) {
	hr := newHeaderReader(func(bool) {})
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	fields := []hpack.HeaderField{{Name: ":status", Value: "200"}}
	for i := 0; len(fields) < 400; i++ {
		fields = append(fields, hpack.HeaderField{Name: "accept", Value: ""})
	}
	for _, n := range []int{len(fields), 1} {
		hr.trim() // as h2conn.readFrame does before each read
		block.Reset()
		for _, f := range fields[:n] {
			_ = enc.WriteField(f)
		}
		f, err := readWhole(hr, block.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if got := len(f.(*http2.MetaHeadersFrame).Fields); got != n {
			t.Fatalf("decoded %d fields, want %d", got, n)
		}
	}
	if c := max(cap(hr.fields), cap(hr.mh.Fields)); c > maxKeptFields {
		t.Errorf("after a block of %d fields and one of 1, the reader keeps room for %d, want at most %d", len(fields), c, maxKeptFields)
	}
	// And after a big block alone, once the next frame is read.
	block.Reset()
	for _, f := range fields {
		_ = enc.WriteField(f)
	}
	if _, err := readWhole(hr, block.Bytes()); err != nil {
		t.Fatal(err)
	}
	hr.trim()
	if c := max(cap(hr.fields), cap(hr.mh.Fields)); c > maxKeptFields {
		t.Errorf("after a block of %d fields, the reader keeps room for %d, want at most %d", len(fields), c, maxKeptFields)
	}

	c := newDialingH2conn(ioBufSize, requestBufSize)
	big := []hpack.HeaderField{{Name: "x-big", Value: strings.Repeat("v", 12<<10)}}
	for _, fs := range [][]hpack.HeaderField{big, big, fields, fields, fields[:1]} {
		c.writeHeaders(1, fs, true)
	}
	if n := c.hbuf.Cap(); n > maxKeptHeaderBuf {
		t.Errorf("after big blocks the encoder keeps a %d-byte buffer, want at most %d", n, maxKeptHeaderBuf)
	}
}

// readWhole decodes block, a whole header block (END_HEADERS) on stream 1.
func readWhole(hr *headerReader, block []byte) (http2.Frame, error) {
	fh := http2.FrameHeader{Type: http2.FrameHeaders, Flags: http2.FlagHeadersEndHeaders, StreamID: 1}
	return hr.read(nil, &http2.HeadersFrame{FrameHeader: fh}, block)
}

// writeBlock sends fields as a request that ends the stream (no message),
// in frames of at most split bytes of header block each.
func (c *rawClient) writeBlock(t *testing.T, id uint32, fields [][2]string, split int) {
	c.buf.Reset()
	for _, kv := range fields {
		_ = c.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	c.writeRaw(id, c.buf.Bytes(), split)
}

// hpackString is s as an HPACK string literal without Huffman coding
// (RFC 7541 §5.1, §5.2).
func hpackString(s string) []byte {
	var p []byte
	if n := len(s); n < 127 {
		p = append(p, byte(n))
	} else {
		p = append(p, 127)
		for n -= 127; n >= 128; n >>= 7 {
			p = append(p, byte(n&127|128))
		}
		p = append(p, byte(n))
	}
	return append(p, s...)
}

// writeRaw sends an encoded header block that ends the stream.
func (c *rawClient) writeRaw(id uint32, block []byte, split int) {
	n := min(split, len(block))
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:n], EndHeaders: n == len(block), EndStream: true}); err != nil {
		return // the relay hung up, as it may
	}
	for block = block[n:]; len(block) > 0; block = block[n:] {
		n = min(split, len(block))
		if c.fr.WriteContinuation(id, n == len(block), block[:n]) != nil {
			return
		}
	}
}

// expectAnswer waits for the response headers of stream id.
func (c *rawClient) expectAnswer(t *testing.T, id uint32) {
	t.Helper()
	f := c.next(t, func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			return f.StreamID == id
		case *http2.RSTStreamFrame:
			return f.StreamID == id
		}
		return false
	})
	if mh, ok := f.(*http2.MetaHeadersFrame); !ok || mh.PseudoValue("status") != "200" {
		t.Fatalf("stream %d: got %v, want response headers", id, f)
	}
}
