package proxy

// Flow-control windows: the arithmetic only (x/net's http2/flow.go is the
// model). Callers do the I/O: they send the WINDOW_UPDATE an inWindow says
// is due, and answer the errors an outWindow reports.

// h2MaxWindow is the largest window HTTP/2 allows, 2^31-1.
const h2MaxWindow = 1<<31 - 1

// inWindow is what a peer may still send us on a connection or a stream,
// and what we have consumed but not yet given back.
type inWindow struct {
	avail int64 // the peer may send this much more
	owed  int64 // consumed, not yet returned with WINDOW_UPDATE
}

// take accounts for n bytes received. False: they overran the window,
// which RFC 9113 §6.9.1 says a receiver MUST treat as FLOW_CONTROL_ERROR
// (of the stream or the connection, as the window is).
func (w *inWindow) take(n int64) bool {
	if n > w.avail {
		return false
	}
	w.avail -= n
	return true
}

// give returns n consumed bytes and says how much to send back in a
// WINDOW_UPDATE now: nothing until batch bytes are owed, so that a small
// call costs no WINDOW_UPDATE at all (grpc-go batches at a quarter of the
// window, as does the relay).
func (w *inWindow) give(n, batch int64) (increment int64) {
	w.owed += n
	if w.owed < batch {
		return 0
	}
	increment = w.owed
	w.avail += increment
	w.owed = 0
	return increment
}

// outWindow is what a peer lets us send on a connection or a stream. It
// may go negative when the peer lowers SETTINGS_INITIAL_WINDOW_SIZE
// (RFC 9113 §6.9.2).
type outWindow struct {
	n int64
}

// add opens the window by n (a WINDOW_UPDATE) or moves it by a change of
// SETTINGS_INITIAL_WINDOW_SIZE. False: the window would exceed 2^31-1,
// which RFC 9113 §6.9.1 (WINDOW_UPDATE) and §6.9.2 (SETTINGS) say MUST be
// treated as FLOW_CONTROL_ERROR; the window is left as it was.
func (w *outWindow) add(n int64) bool {
	if w.n+n > h2MaxWindow {
		return false
	}
	w.n += n
	return true
}

// take spends n bytes of the window; callers send no more than avail.
func (w *outWindow) take(n int64) { w.n -= n }

// avail is what may be sent now.
func (w *outWindow) avail() int64 { return w.n }
