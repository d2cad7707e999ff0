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
// of the buffer instead. Everything else, and anything the framer would
// refuse (a frame over the size limit, stream 0, padding, priority, a block
// that continues), still goes through the framer, which then raises the
// same errors as before.

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
// there and a DATA or a whole-block HEADERS frame the framer would accept
// as it is; ok is false (and nothing is read) otherwise. The frame is
// valid until the next read.
func (c *h2conn) readFast() (f http2.Frame, ok bool, err error) {
	n := c.br.Buffered()
	if n < 9 {
		return nil, false, nil
	}
	h, _ := c.br.Peek(9)
	length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	typ, flags := http2.FrameType(h[3]), http2.Flags(h[4])
	id := binary.BigEndian.Uint32(h[5:]) & (1<<31 - 1)
	if length > h2DefaultMaxFrame || n < 9+length || id == 0 {
		return nil, false, nil
	}
	switch {
	case typ == http2.FrameData && flags&^http2.FlagDataEndStream == 0:
	case typ == http2.FrameHeaders && flags&^(http2.FlagHeadersEndStream|http2.FlagHeadersEndHeaders) == 0 &&
		flags.Has(http2.FlagHeadersEndHeaders):
	default:
		return nil, false, nil
	}
	frame, _ := c.br.Peek(9 + length)
	if t := c.tap; t != nil {
		if t.err != nil {
			return nil, true, t.err
		}
		t.saw(frame)
	}
	// Discarding leaves the bytes where they are until the next read.
	_, _ = c.br.Discard(9 + length)
	fh := http2.FrameHeader{Type: typ, Flags: flags, Length: uint32(length), StreamID: id}
	if typ == http2.FrameData {
		c.fastData = dataFrame{FrameHeader: fh, data: frame[9:]}
		return &c.fastData, true, nil
	}
	f, err = c.hr.readWhole(fh, frame[9:])
	return f, true, err
}
