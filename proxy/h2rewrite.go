package proxy

import "encoding/binary"

// grpcPrefixLen is gRPC's message prefix: a compressed flag and a length.
const grpcPrefixLen = 5

// forwardRewritten is forward for a response under RewriteResponse: each
// whole message goes through the rewrite on its way to dst. The message
// size limit was checked before (msgLimit), which bounds what is held.
func (f *flow) forwardRewritten(p []byte, end bool) {
	f.consumed(int64(len(p)))
	buf := p
	if len(f.held) > 0 {
		f.held = append(f.held, p...)
		buf = f.held
	}
	carried := false // END_STREAM went out with a message
	for len(buf) >= grpcPrefixLen {
		size := int(binary.BigEndian.Uint32(buf[1:grpcPrefixLen]))
		if len(buf)-grpcPrefixLen < size {
			break
		}
		whole := buf[:grpcPrefixLen+size]
		buf = buf[grpcPrefixLen+size:]
		last := end && len(buf) == 0
		carried = carried || last
		f.forward(f.rewritten(whole), last)
	}
	if len(buf) == 0 {
		f.held = nil
	} else {
		// p is only valid until the next read.
		f.held = append([]byte(nil), buf...)
	}
	if end && !carried {
		f.flushHeld(true)
	}
}

// rewritten returns a whole gRPC message, prefix included, after the
// rewrite: the same bytes when nothing changed (or the message is
// compressed), else a new message.
func (f *flow) rewritten(whole []byte) []byte {
	if whole[0] != 0 {
		return whole
	}
	msg := whole[grpcPrefixLen:]
	out := f.rewrite(msg)
	if len(out) == len(msg) && (len(out) == 0 || &out[0] == &msg[0]) {
		return whole
	}
	framed := make([]byte, grpcPrefixLen+len(out))
	binary.BigEndian.PutUint32(framed[1:], uint32(len(out)))
	copy(framed[grpcPrefixLen:], out)
	return framed
}

// flushHeld sends what is left of a message that never completed, as it
// came: the stream is ending, and the client is the one to call it
// malformed.
func (f *flow) flushHeld(end bool) {
	if len(f.held) == 0 && !end {
		return
	}
	held := f.held
	f.held = nil
	f.forward(held, end)
}
