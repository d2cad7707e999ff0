package proxy

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func TestIndexedOnly(t *testing.T) {
	for _, tc := range []struct {
		block []byte
		want  bool
	}{
		{[]byte{0x83, 0x86, 0xbe}, true},       // :method POST, :scheme http, a dynamic entry
		{[]byte{0x88}, true},                   // :status 200
		{nil, false},                           // nothing to remember
		{[]byte{0x80}, false},                  // index 0: a decoding error
		{[]byte{0x83, 0xff, 0x81}, false},      // an index of 127 or more takes more bytes (here cut short)
		{[]byte{0x83, 0x40, 0x01, 'a'}, false}, // a literal with incremental indexing
		{[]byte{0x3f, 0xe1, 0x1f}, false},      // a table size update
		{[]byte{0x0f, 0x2b, 0x01, 'x'}, false}, // a literal without indexing
		{bytes.Repeat([]byte{0x83}, maxMemoBlock+1), false},
	} {
		if got := indexedOnly(tc.block); got != tc.want {
			t.Errorf("indexedOnly(% x) = %v, want %v", tc.block, got, tc.want)
		}
	}
}

// headerLists are field lists drawn from a small vocabulary, so that
// lists repeat (and become indexed-only blocks) and tables churn: the
// values of grpc-timeout, like the kubelet's, change from call to call.
func headerLists(rng *rand.Rand, n int) [][]hpack.HeaderField {
	methods := []string{"/runtime.v1.RuntimeService/Version", "/runtime.v1.RuntimeService/ListContainers", "/runtime.v1.ImageService/ListImages"}
	var out [][]hpack.HeaderField
	for range n {
		var fs []hpack.HeaderField
		switch rng.IntN(3) {
		case 0: // a request
			fs = []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
				{Name: ":path", Value: methods[rng.IntN(len(methods))]}, {Name: ":authority", Value: "localhost"},
				{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}}
			if rng.IntN(2) == 0 {
				fs = append(fs, hpack.HeaderField{Name: "grpc-timeout", Value: fmt.Sprintf("%du", rng.IntN(4))})
			}
		case 1: // response headers
			fs = []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}
		default: // trailers
			fs = []hpack.HeaderField{{Name: "grpc-status", Value: fmt.Sprint(rng.IntN(3))}, {Name: "grpc-message", Value: ""}}
			if rng.IntN(4) == 0 {
				fs = append(fs, hpack.HeaderField{Name: "x-big", Value: string(bytes.Repeat([]byte{'v'}, rng.IntN(3000)))})
			}
		}
		out = append(out, fs)
	}
	return out
}

// The decode memo may answer a block only with what decoding it would
// give: the same bytes mean other fields once the table has changed.
// Checked against a decoder of its own over blocks whose table churns.
func TestDecodeMemoAnswersAsTheDecoderWould(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 15))
	var wire bytes.Buffer
	wfr := http2.NewFramer(&wire, nil)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	ref := hpack.NewDecoder(4096, nil)
	hr := newHeaderReader(func(bool) {})
	rfr := http2.NewFramer(nil, &wire)
	rfr.SetMaxReadFrameSize(1 << 20)
	hits := 0
	for i, fields := range headerLists(rng, 3000) {
		if rng.IntN(50) == 0 {
			enc.SetMaxDynamicTableSize(uint32(rng.IntN(4097)))
		}
		block.Reset()
		for _, f := range fields {
			if err := enc.WriteField(f); err != nil {
				t.Fatal(err)
			}
		}
		want, err := ref.DecodeFull(block.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		id := uint32(2*i + 1)
		if err := wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		memoBefore := hr.memo.lookup(block.Bytes()) != nil
		f, err := hr.readFrame(rfr)
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		got := f.(*http2.MetaHeadersFrame).Fields
		if !slices.Equal(got, want) {
			t.Fatalf("block %d (% x, from the memo: %v): got %v, want %v", i, block.Bytes(), memoBefore, got, want)
		}
		if memoBefore {
			hits++
		}
	}
	// The memo must also be used, or the test proves nothing.
	if hits < 200 {
		t.Fatalf("the memo answered %d blocks of 3000", hits)
	}
}

// The encode memo may reuse a block only where the encoder would write
// the same: checked by a decoder of its own reading what a connection
// writes, with the peer shrinking the table now and then.
func TestEncodeMemoWritesWhatTheEncoderWould(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	c := newDialingH2conn()
	c.peerMaxFrame = 1 << 20
	var settings bytes.Buffer
	sfr := http2.NewFramer(&settings, nil)
	sread := http2.NewFramer(nil, &settings)
	hits := 0
	lists := headerLists(rng, 3000)
	// The encoder's table only ever shrinks to the peer's limit: a few
	// steps down, each evicting entries the memo may still hold.
	shrinks := map[int]uint32{500: 2000, 1000: 1000, 1500: 600, 2000: 400, 2500: 300}
	// Each shrink comes right before a block the memo holds.
	resp := []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}
	for i := range shrinks {
		lists[i-2], lists[i-1], lists[i] = resp, resp, resp
	}
	for i, fields := range lists {
		if size, ok := shrinks[i]; ok {
			if err := sfr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: size}); err != nil {
				t.Fatal(err)
			}
			f, err := sread.ReadFrame()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.applySettings(f.(*http2.SettingsFrame)); err != nil {
				t.Fatal(err)
			}
		}
		if c.encMemo.lookup(fields) != nil {
			hits++
		}
		c.writeHeaders(uint32(2*i+1), fields, true)
	}
	c.flush()
	if c.werr != nil {
		t.Fatal(c.werr)
	}
	rfr := http2.NewFramer(nil, bytes.NewReader(c.pending.Bytes()))
	rfr.SetMaxReadFrameSize(1 << 20)
	rfr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	raw := http2.NewFramer(nil, bytes.NewReader(c.pending.Bytes()))
	raw.SetMaxReadFrameSize(1 << 20)
	for i, want := range lists {
		f, err := rfr.ReadFrame()
		if err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
		if got := f.(*http2.MetaHeadersFrame).Fields; !slices.Equal(got, want) {
			t.Fatalf("block %d: decoded %v, want %v", i, got, want)
		}
		rf, err := raw.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		// RFC 7541 §4.2: the first block after the table shrank MUST
		// begin with a dynamic table size update (001xxxxx).
		if _, ok := shrinks[i]; ok {
			if b := rf.(*http2.HeadersFrame).HeaderBlockFragment(); b[0]&0xe0 != 0x20 {
				t.Fatalf("block %d, the first after the table shrank, begins % x: no size update", i, b[:1])
			}
		}
	}
	if hits < 200 {
		t.Fatalf("the memo answered %d blocks of 3000", hits)
	}
}
