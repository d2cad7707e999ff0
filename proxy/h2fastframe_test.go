package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// frameStream writes n random frames: the ones the fast path takes, and
// every way a frame can differ from them (padding, priority, unknown
// flags, CONTINUATIONs, stream 0, over the size limit, other types), so
// that both readers meet the framer's errors too.
func frameStream(rng *rand.Rand, n int) []byte {
	var out bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	fr.AllowIllegalWrites = true
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	fields := func() []byte {
		block.Reset()
		_ = enc.WriteField(hpack.HeaderField{Name: ":method", Value: "POST"})
		_ = enc.WriteField(hpack.HeaderField{Name: ":path", Value: fmt.Sprintf("/runtime.v1.RuntimeService/M%d", rng.IntN(3))})
		if rng.IntN(3) == 0 {
			_ = enc.WriteField(hpack.HeaderField{Name: "x-v", Value: string(bytes.Repeat([]byte{'v'}, rng.IntN(300)))})
		}
		return slices.Clone(block.Bytes())
	}
	for range n {
		id := uint32(2*rng.IntN(5) + 1)
		if rng.IntN(30) == 0 {
			id = 0
		}
		data := make([]byte, rng.IntN(2000))
		if rng.IntN(30) == 0 {
			data = make([]byte, h2DefaultMaxFrame+1+rng.IntN(100))
		}
		switch rng.IntN(9) {
		case 0, 1, 2:
			_ = fr.WriteData(id, rng.IntN(2) == 0, data)
		case 3:
			_ = fr.WriteDataPadded(id, rng.IntN(2) == 0, data, make([]byte, rng.IntN(20)))
		case 4:
			flags := http2.Flags(rng.IntN(256))
			_ = fr.WriteRawFrame(http2.FrameData, flags, id, data)
		case 5, 6:
			p := http2.HeadersFrameParam{StreamID: id, BlockFragment: fields(), EndStream: rng.IntN(2) == 0, EndHeaders: true}
			switch rng.IntN(6) {
			case 0:
				p.PadLength = uint8(rng.IntN(10))
			case 1:
				p.Priority = http2.PriorityParam{StreamDep: uint32(rng.IntN(9)), Weight: 7}
			}
			_ = fr.WriteHeaders(p)
		case 7:
			b := fields()
			cut := len(b) / 2
			_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:cut]})
			if rng.IntN(10) != 0 {
				_ = fr.WriteContinuation(id, true, b[cut:])
			}
		default:
			switch rng.IntN(6) {
			case 0:
				// Stream 0 as often as not: the connection's window.
				_ = fr.WriteWindowUpdate(id*uint32(rng.IntN(2)), uint32(rng.IntN(100)+1))
			case 1:
				_ = fr.WritePing(rng.IntN(2) == 0, [8]byte{1, byte(rng.IntN(256))})
			case 2:
				// A WINDOW_UPDATE of 0, or the reserved bit set; any flags.
				inc := []uint32{0, 1 << 31, 1<<31 | 5}[rng.IntN(3)]
				_ = fr.WriteRawFrame(http2.FrameWindowUpdate, http2.Flags(rng.IntN(256)), id*uint32(rng.IntN(2)), binary.BigEndian.AppendUint32(nil, inc))
			case 3:
				// A PING on a stream, with any flags, of any length.
				_ = fr.WriteRawFrame(http2.FramePing, http2.Flags(rng.IntN(256)), id*uint32(rng.IntN(2)), make([]byte, []int{8, 8, 0, 7, 9}[rng.IntN(5)]))
			default:
				_ = fr.WriteRawFrame(http2.FrameType(rng.IntN(12)), http2.Flags(rng.IntN(256)), id, data[:min(len(data), 16)])
			}
		}
	}
	return out.Bytes()
}

// readAll reads frames until the first error, in the form two readers can
// be compared by.
func readAll(t *testing.T, stream []byte, bufSize int, tap bool, read func(c *h2conn) (http2.Frame, error)) []string {
	a, b := net.Pipe()
	go func() {
		_, _ = a.Write(stream)
		_ = a.Close()
	}()
	defer b.Close()
	c := newH2conn(b, bufSize)
	if tap {
		c.tap = &continuationTap{}
	}
	var out []string
	for {
		f, err := read(c)
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				// The stream's error; the connection reads on.
				out = append(out, fmt.Sprintf("stream error %d %v", se.StreamID, se.Code))
				continue
			}
			return append(out, fmt.Sprintf("error %v", err))
		}
		switch f := f.(type) {
		case *dataFrame:
			out = append(out, fmt.Sprintf("DATA %+v % x", f.FrameHeader, f.Data()))
		case *http2.DataFrame:
			d := dataOf(f)
			out = append(out, fmt.Sprintf("DATA %+v % x", d.FrameHeader, d.Data()))
		case *http2.MetaHeadersFrame:
			out = append(out, fmt.Sprintf("HEADERS %v %v %v", f.FrameHeader, f.Truncated, f.Fields))
		case *http2.WindowUpdateFrame:
			out = append(out, fmt.Sprintf("WINDOW_UPDATE %v %d", f.FrameHeader, f.Increment))
		case *http2.PingFrame:
			out = append(out, fmt.Sprintf("PING %v %v % x", f.FrameHeader, f.IsAck(), f.Data))
		default:
			out = append(out, fmt.Sprintf("%T %+v", f, f.Header()))
		}
	}
}

// What the fast path reads must be what the framer would have read, frame
// for frame and error for error, whatever the bytes; the framer's own
// reading of the same bytes is the reference (the path as it was before
// the fast path).
func TestFastFramesReadAsTheFramerDoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 4))
	fast, slow := 0, 0 // DATA frames read each way
	fastControl := 0   // WINDOW_UPDATE and PING frames read fast
	for i := range 300 {
		stream := frameStream(rng, 1+rng.IntN(40))
		size := []int{idleBufSize, ioBufSize}[i%2]
		tap := i%3 == 0
		want := readAll(t, stream, size, tap, func(c *h2conn) (http2.Frame, error) { return c.hr.readFrame(c.fr) })
		got := readAll(t, stream, size, tap, func(c *h2conn) (http2.Frame, error) {
			f, err := c.readFrame()
			switch f {
			case &c.fastData:
				fast++
			case &c.fastWindow, &c.fastPing:
				fastControl++
			}
			if _, ok := f.(*http2.DataFrame); ok {
				slow++
			}
			return f, err
		})
		if !slices.Equal(got, want) {
			for j := range min(len(got), len(want)) {
				if got[j] != want[j] {
					t.Fatalf("stream %d, frame %d:\nfast path: %s\nframer:    %s", i, j, got[j], want[j])
				}
			}
			t.Fatalf("stream %d: %d frames through the fast path, %d through the framer:\n%v\n%v", i, len(got), len(want), got, want)
		}
	}
	if fast < 100 || slow < 10 {
		t.Fatalf("DATA frames: %d read fast, %d by the framer; the test must exercise both", fast, slow)
	}
	if fastControl < 50 {
		t.Fatalf("%d WINDOW_UPDATE and PING frames read fast; the test must exercise them", fastControl)
	}
}

// A block that continues is left to the framer and the client's
// CONTINUATION tap, also after frames read fast: a flood of small
// CONTINUATIONs is caught as before.
func TestContinuationFloodCaughtAfterFastFrames(t *testing.T) {
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
	read := func(c *h2conn) (http2.Frame, error) { return c.readFrame() }
	got := readAll(t, out.Bytes(), ioBufSize, true, read)
	want := "error " + calm("too_many_continuations").Error()
	if last := got[len(got)-1]; last != want {
		t.Fatalf("frames read: %v\nlast %q, want %q", got, last, want)
	}
}
