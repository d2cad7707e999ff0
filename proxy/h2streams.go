package proxy

import "iter"

// Where a session keeps its open calls: in its map by client stream ID and
// in its upstream connection's by upstream stream ID, from the client's
// HEADERS (open) to the call's end (forget). Callers hold the session's mu.

// open keeps st, a call just begun.
func (s *session) open(st *stream) {
	mustHold(&s.mu, "session.mu")
	s.streams[st.cid] = st
	st.up.streams[st.uid] = st
}

// forget drops st, a call that ended.
func (s *session) forget(st *stream) {
	mustHold(&s.mu, "session.mu")
	delete(s.streams, st.cid)
	delete(st.up.streams, st.uid)
}

// clientStream returns the open stream with client stream ID id, or nil.
func (s *session) clientStream(id uint32) *stream {
	return s.streams[id]
}

// stream returns the open stream with upstream stream ID id, or nil.
func (up *upstream) stream(id uint32) *stream {
	return up.streams[id]
}

// streamOn returns the open stream with ID id on up's connection (the
// client's if nil).
func (s *session) streamOn(up *upstream, id uint32) *stream {
	if up == nil {
		return s.clientStream(id)
	}
	return up.stream(id)
}

// openCount is how many calls are open.
func (s *session) openCount() int {
	return len(s.streams)
}

// openOn is how many calls are open on up.
func (s *session) openOn(up *upstream) int {
	return len(up.streams)
}

// openStreams yields every open call, or, given up, every open call on up.
// The loop's body may end the call it is given (deleting the entry being
// ranged over is safe), and no other.
func (s *session) openStreams(up *upstream) iter.Seq[*stream] {
	return func(yield func(*stream) bool) {
		m := s.streams
		if up != nil {
			m = up.streams
		}
		for _, st := range m {
			if !yield(st) {
				return
			}
		}
	}
}
