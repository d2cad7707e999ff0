package proxy

import (
	"time"

	"golang.org/x/net/http2"
)

// Flood policing of client connections. One client that makes crishim work
// without relaying anything (PINGs to answer, SETTINGS to acknowledge,
// streams opened and reset at once, header blocks of empty CONTINUATION
// frames) would take the CPU every other client's calls need: such a
// connection is told GOAWAY(ENHANCE_YOUR_CALM) and closed, as grpc-go and
// x/net's server do. The counting is integer arithmetic in the reader;
// runtimes are trusted and not policed.
const (
	// PINGs follow grpc-go's server keepalive enforcement: a PING is free
	// when crishim sent the client HEADERS or DATA since the one before
	// (grpc-go's bandwidth probe follows each answer); otherwise one
	// sooner than pingMinInterval after the last is a strike, and more
	// than maxPingStrikes end the connection. grpc-go clients ping no
	// more often than every 10 s when idle.
	pingMinInterval = 5 * time.Second
	maxPingStrikes  = 2
	// maxIdleFrames bounds the frames that do no work (RST_STREAM,
	// SETTINGS, PRIORITY, unknown types, empty DATA) a connection may send
	// beyond one per call it completed: a client cancels some of its
	// calls, never most of them for long.
	maxIdleFrames = 1000
	// maxSmallContinuations bounds the CONTINUATION frames of one header
	// block that are not full: a sender splits a block into full frames
	// and one last, so anything else is padding out the framer's work.
	maxSmallContinuations = 16
)

// floodGuard counts one client connection's frames that do no work.
// Guarded by the session's mu.
type floodGuard struct {
	idle        int
	pingStrikes int
	lastPing    time.Time
}

// calm is the answer to a flood.
func calm(debug string) error {
	return protoError{code: http2.ErrCodeEnhanceYourCalm, reason: reasonFlood, detail: debug, debug: debug}
}

// idleFrame counts a frame that relays nothing.
func (g *floodGuard) idleFrame() error {
	g.idle++
	if g.idle > maxIdleFrames {
		return calm("too_many_control_frames")
	}
	return nil
}

// callDone credits a call that completed.
func (g *floodGuard) callDone() {
	if g.idle > 0 {
		g.idle--
	}
}

// ping polices a PING; answered says whether crishim sent the client
// HEADERS or DATA since the previous PING.
func (g *floodGuard) ping(answered bool) error {
	if answered {
		g.pingStrikes, g.lastPing = 0, time.Time{}
		return nil
	}
	now := time.Now()
	if !g.lastPing.IsZero() && now.Sub(g.lastPing) < pingMinInterval {
		g.pingStrikes++
		if g.pingStrikes > maxPingStrikes {
			return calm("too_many_pings") // grpc-go's words
		}
	}
	g.lastPing = now
	return nil
}

// continuationTap watches the frame headers read from a client's
// connection, under its framer (connReader feeds it). The framer takes a whole header block, CONTINUATIONs and all, within one
// ReadFrame, so that is the only place to count them. Only the client's
// reader touches it.
type continuationTap struct {
	frames records
	small  int // CONTINUATIONs of the current block that are not full
	err    error
}

// saw takes in bytes read from the client, in order.
func (t *continuationTap) saw(p []byte) {
	for {
		h, rest, ok := t.frames.header(p, 9)
		if !ok {
			return
		}
		p = rest
		length := uint64(h[0])<<16 | uint64(h[1])<<8 | uint64(h[2])
		t.frames.left = length
		typ, flags := http2.FrameType(h[3]), http2.Flags(h[4])
		switch {
		case typ == http2.FrameHeaders:
			t.small = 0
		case typ == http2.FrameContinuation && !flags.Has(http2.FlagContinuationEndHeaders) && length < h2DefaultMaxFrame:
			t.small++
			if t.small > maxSmallContinuations && t.err == nil {
				t.err = calm("too_many_continuations")
			}
		}
	}
}
