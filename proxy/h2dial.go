package proxy

import (
	"fmt"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// upstream returns the connection for a route, starting its dial if there
// is none. The dial runs on a goroutine of its own, which then becomes the
// connection's reader: a runtime slow to accept holds back only the calls
// that wait for it, never the client's reader and the session's other
// calls. Until the dial is done, what is written to the connection waits
// in memory (HEADERS up to maxPending, DATA up to the connection window).
// Callers hold mu.
func (s *session) upstream(rt route) *upstream {
	if up := s.ups[rt]; up != nil {
		return up
	}
	// Answers come in through the read buffer, requests go out through
	// the write buffer.
	rsize, wsize := ioBufSize, requestBufSize
	if rt == routeLocal {
		rsize, wsize = localIOBufSize, localIOBufSize
	}
	up := &upstream{c: newDialingH2conn(rsize, wsize), route: rt, streams: map[uint32]*stream{}, nextID: 1, dialing: true}
	up.c.writeRaw([]byte(http2.ClientPreface))
	up.c.writeOurSettings(false)
	s.ups[rt] = up
	s.wg.Add(1) // the session's teardown cancels s.ctx and waits
	go s.dial(up)
	return up
}

// dial connects up, then reads it until it ends.
func (s *session) dial(up *upstream) {
	defer s.wg.Done()
	nc, err := s.r.endpoints[up.route].connect(s.ctx)
	if err == nil && !s.addConn(up.c, nc) {
		err = fmt.Errorf("connect to the %s: the client connection closed", s.r.endpoints[up.route].name)
	}
	if err != nil {
		s.mu.Lock()
		s.dialFailed(up, err)
		s.mu.Unlock()
		s.flushAll(s.client)
		return
	}
	up.c.attach()
	s.mu.Lock()
	up.dialing = false
	s.mu.Unlock()
	s.readUpstream(up)
}

// dialFailed answers the calls that waited for a dial: Unavailable, with
// the reason, at once (the endpoint's backoff makes the next calls fail as
// fast until a dial may succeed).
func (s *session) dialFailed(up *upstream, err error) {
	if s.ups[up.route] == up {
		s.ups[up.route] = nil
	}
	up.c.wmu.Lock()
	up.c.failLocked(err) // it has no socket to close
	up.c.wmu.Unlock()
	for st := range s.openStreams(up) {
		// Nothing reached the runtime: no RST_STREAM for it.
		st.toUp.dstEnded, st.toClient.srcEnded = true, true
		s.endLocally(st, codes.Unavailable, "crishim: "+err.Error())
	}
}
