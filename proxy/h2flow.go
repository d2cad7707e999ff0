package proxy

import (
	"slices"

	"golang.org/x/net/http2/hpack"
)

// flow is one direction of a relayed stream: bytes from src to dst. Flow
// control is per hop: src's window is replenished only for bytes written to
// dst (or dropped), so a destination that does not read holds the source
// back instead of making crishim buffer. All fields are guarded by the
// session's mu.
type flow struct {
	st           *stream
	src, dst     *h2conn
	srcID, dstID uint32

	out outWindow // dst's window for this stream
	in  inWindow  // the window src has on this stream

	// Bytes waiting for dst's window, at most what src was allowed to
	// send; then either trailers or a bare END_STREAM.
	queue    byteQueue
	endAfter bool
	trailers []hpack.HeaderField
	queued   bool // on dst.blocked

	srcEnded bool // src sent END_STREAM
	dstEnded bool // we sent END_STREAM to dst
	msgs     msgLimit

	// A response under RewriteResponse: its messages are held until whole
	// and src is credited as they arrive (see prepaid), since what goes to
	// dst need not be the same bytes.
	rewrite Rewrite
	held    []byte
}

// prepaid says src was credited for the flow's bytes on arrival, not when
// they leave.
func (f *flow) prepaid() bool { return f.rewrite != nil }

func (f *flow) init(st *stream, src, dst *h2conn, srcID, dstID uint32) {
	f.st, f.src, f.dst, f.srcID, f.dstID = st, src, dst, srcID, dstID
	f.out = outWindow{dst.peerInitWin}
	f.in = inWindow{avail: relayStreamWindow}
}

// consumed returns n bytes of src's window: they left crishim (or were
// dropped). Updates are batched to a quarter of the window, as grpc-go does,
// so a small call costs no WINDOW_UPDATE at all.
func (f *flow) consumed(n int64) {
	if n == 0 {
		return
	}
	// Once src has ended the stream its window no longer matters.
	if !f.srcEnded {
		if inc := f.in.give(n, relayStreamWindow/4); inc > 0 {
			f.src.writeWindowUpdate(f.srcID, inc)
		}
	}
	f.src.credit(n)
}

// credit gives the peer n bytes of its connection window back.
func (c *h2conn) credit(n int64) {
	if inc := c.recv.give(n, relayConnWindow/4); inc > 0 {
		c.writeWindowUpdate(0, inc)
	}
}

// forward sends p to dst now as far as windows allow and queues the rest.
func (f *flow) forward(p []byte, end bool) {
	if end {
		f.srcEnded = true
	}
	if f.queue.len() == 0 && f.trailers == nil {
		n := f.send(p, end)
		p = p[n:]
		if len(p) == 0 {
			if end && !f.dstEnded {
				// Nothing was left to carry the flag (p was empty).
				f.dst.writeData(f.dstID, nil, true)
				f.dstEnded = true
			}
			return
		}
	}
	f.queue.push(p)
	if end {
		f.endAfter = true
	}
	f.block()
}

// send writes as much of p as the windows allow, in frames dst accepts, and
// returns how much it wrote. end goes on the last frame if all of p fits.
func (f *flow) send(p []byte, end bool) int {
	sent := 0
	for len(p) > 0 {
		n := int64(len(p))
		n = min(n, f.out.avail(), f.dst.send.avail(), int64(f.dst.peerMaxFrame))
		if n <= 0 {
			break
		}
		last := end && int(n) == len(p)
		f.dst.writeData(f.dstID, p[:n], last)
		if last {
			f.dstEnded = true
		}
		f.out.take(n)
		f.dst.send.take(n)
		p = p[n:]
		sent += int(n)
	}
	if !f.prepaid() {
		f.consumed(int64(sent))
	}
	return sent
}

// pump sends what is queued once dst has opened its windows, then the
// trailers or END_STREAM that waited behind it.
func (f *flow) pump() {
	for f.queue.len() > 0 {
		p := f.queue.head()
		last := len(p) == f.queue.len()
		n := f.send(p, last && f.endAfter && f.trailers == nil)
		f.queue.consume(n)
		if n < len(p) {
			f.block()
			return
		}
	}
	switch {
	case f.dstEnded:
	case f.trailers != nil:
		f.dst.writeHeaders(f.dstID, f.trailers, true)
		f.trailers = nil
		f.dstEnded = true
	case f.endAfter:
		f.dst.writeData(f.dstID, nil, true)
		f.dstEnded = true
	}
}

// endWith sends trailers to dst after whatever is queued.
func (f *flow) endWith(trailers []hpack.HeaderField) {
	f.flushHeld(false)
	f.srcEnded = true
	if f.dstEnded {
		return
	}
	if f.queue.len() > 0 {
		// They wait: the frame they came in is reused by the next read.
		f.trailers = slices.Clone(trailers)
		return
	}
	f.trailers = trailers
	f.pump()
}

// drop discards what is queued, returning its bytes to src's connection
// window (the stream is over; its own window no longer matters).
func (f *flow) drop() {
	f.held = nil
	if n := int64(f.queue.len()); n > 0 && !f.prepaid() {
		f.src.credit(n)
	}
	f.queue.reset()
	f.trailers, f.endAfter = nil, false
	if f.queued {
		f.dst.blocked = slices.DeleteFunc(f.dst.blocked, func(g *flow) bool { return g == f })
		f.queued = false
	}
}

func (f *flow) block() {
	if !f.queued && f.out.avail() > 0 {
		// Only the connection window can free this flow without a
		// WINDOW_UPDATE for its own stream.
		f.queued = true
		f.dst.blocked = append(f.dst.blocked, f)
	}
}
