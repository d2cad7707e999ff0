package proxy

import (
	"encoding/binary"

	"golang.org/x/net/http2"
)

// The framer reads each frame with two io.ReadFull calls through the
// connection's reader (header, then payload copied into its own buffer)
// and parses it through a table of functions. A small call's frames are
// all in the read buffer by the time the reader looks, so the two it
// relays, DATA and a HEADERS that is a whole block, are taken straight out
// of the buffer instead, and so are the two every gRPC peer sends after
// nearly every call: the WINDOW_UPDATE and the PING of grpc-go's bandwidth
// probe (the framer allocates a frame for each). Everything else, and
// anything the framer would refuse (a frame over the size limit, DATA or
// HEADERS on stream 0, padding, priority, a block that continues, a
// WINDOW_UPDATE of 0 or a PING on a stream, a wrong length), still goes
// through the framer, which then raises the same errors as before.

// dataFrame is a DATA frame as the session handles it: read here, or
// copied from the framer's. Embedding FrameHeader makes it an http2.Frame.
type dataFrame struct {
	http2.FrameHeader
	data []byte
}

func (f *dataFrame) Data() []byte      { return f.data }
func (f *dataFrame) StreamEnded() bool { return f.Flags.Has(http2.FlagDataEndStream) }
func dataOf(f *http2.DataFrame) dataFrame {
	return dataFrame{FrameHeader: f.FrameHeader, data: f.Data()}
}

// readFast reads the next frame out of the read buffer if it is whole
// there and one the framer would accept as it is (see fastKind); ok is
// false (and nothing is read) otherwise. The frame is valid until the next
// read.
func (c *h2conn) readFast() (f http2.Frame, ok bool, err error) {
	n := c.br.Buffered()
	if n < 9 {
		return nil, false, nil
	}
	h, _ := c.br.Peek(9)
	length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	if length > h2DefaultMaxFrame || n < 9+length {
		return nil, false, nil
	}
	frame, _ := c.br.Peek(9 + length)
	typ, flags := http2.FrameType(h[3]), http2.Flags(h[4])
	id := binary.BigEndian.Uint32(h[5:]) & (1<<31 - 1)
	if !fastKind(typ, flags, id, frame[9:]) {
		return nil, false, nil
	}
	if t := c.tap; t != nil {
		if t.err != nil {
			return nil, true, t.err
		}
		t.sawWhole(typ, frame)
	}
	// Discarding leaves the bytes where they are until the next read.
	_, _ = c.br.Discard(9 + length)
	fh := http2.FrameHeader{Type: typ, Flags: flags, Length: uint32(length), StreamID: id}
	switch typ {
	case http2.FrameData:
		c.fastData = dataFrame{FrameHeader: fh, data: frame[9:]}
		return &c.fastData, true, nil
	case http2.FrameWindowUpdate:
		c.fastWindow = http2.WindowUpdateFrame{FrameHeader: fh, Increment: binary.BigEndian.Uint32(frame[9:]) & (1<<31 - 1)}
		return &c.fastWindow, true, nil
	case http2.FramePing:
		c.fastPing = http2.PingFrame{FrameHeader: fh}
		copy(c.fastPing.Data[:], frame[9:])
		return &c.fastPing, true, nil
	}
	f, err = c.hr.readWhole(fh, frame[9:])
	return f, true, err
}

// fastKind says whether the framer would take a frame of this type, flags,
// stream and payload as it is, raising no error and treating it no
// differently than the fast path: the rules the framer checks are in
// x/net/http2 frame.go (parseDataFrame, parseHeadersFrame,
// parseWindowUpdateFrame, parsePingFrame).
func fastKind(typ http2.FrameType, flags http2.Flags, id uint32, payload []byte) bool {
	switch typ {
	case http2.FrameData:
		// Padding is the framer's to strip and check.
		return id != 0 && flags&^http2.FlagDataEndStream == 0
	case http2.FrameHeaders:
		// Padding and priority are the framer's, and so is a block that
		// continues.
		return id != 0 && flags&^(http2.FlagHeadersEndStream|http2.FlagHeadersEndHeaders) == 0 &&
			flags.Has(http2.FlagHeadersEndHeaders)
	case http2.FrameWindowUpdate:
		// RFC 9113 §6.9: an increment of 0 is an error (of the stream or
		// the connection), a length other than 4 a FRAME_SIZE_ERROR.
		return len(payload) == 4 && binary.BigEndian.Uint32(payload)&(1<<31-1) != 0
	case http2.FramePing:
		// RFC 9113 §6.7: a PING on a stream is a PROTOCOL_ERROR, a length
		// other than 8 a FRAME_SIZE_ERROR.
		return id == 0 && len(payload) == 8
	}
	return false
}
