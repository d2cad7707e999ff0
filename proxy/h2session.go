package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"

	"github.com/crishim/crishim/caller"
)

// session is one client connection and the upstream connections its calls
// travel on. Each connection has one reader goroutine, which handles a frame
// by writing straight into the destination connection's buffer and flushes
// once it has nothing more to read: a unary call costs two reads and two
// writes in crishim, and no goroutine handoff.
//
// Upstream connections belong to the session rather than being shared:
// then a client that stops reading holds back only its own calls, and
// connection-level flow control maps one to one.
type session struct {
	// Set at creation, read by every goroutine of the session.
	r      *relay
	client *h2conn

	// Under mu, which every reader takes to handle a frame.
	mu      sync.Mutex
	lastCID uint32
	goAway2 bool               // sent GOAWAY(lastCID): refuse newer streams
	streams map[uint32]*stream // by client stream ID
	ups     [numRoutes]*upstream
	// lastPath and lastInfo are the previous call's :path and what it
	// resolved to. A client calls a few methods over and over, and a
	// :path the HPACK table holds decodes to the table's own string, so
	// that comparing them is mostly one pointer check (the path table's
	// map hashes the path). Only a comparison: nothing relies on it.
	lastPath string
	lastInfo *pathInfo
	// started and ended are calls still to be counted (as in flight) and
	// counted and logged (as done): that waits until the reader that
	// started or ended them has written what it relayed (flushAll), as it
	// is no part of the call's path.
	started  []MethodObserver
	ended    []endedCall
	draining map[*upstream]struct{} // gone away, finishing their calls
	guard    floodGuard
	goAway1  bool // sent GOAWAY(max) and a PING: stop soon
	// goAwayTimer sends GOAWAY(lastCID) if the PING's ack is late.
	goAwayTimer *time.Timer

	// other says the client is not the kubelet: its calls go by
	// pathInfo.other. Set once, before the first frame is read.
	other bool

	ctx    context.Context // ends dials when the session ends; holds the caller
	cancel context.CancelFunc
	wg     sync.WaitGroup // upstream readers

	// conns are every connection of the session, for kill, which must not
	// wait for mu: a reader holding mu may be stuck writing to a peer that
	// does not read. connMu is never held across I/O.
	connMu sync.Mutex
	conns  []*h2conn
	killed bool
}

// endedCall is what counting and logging an ended call needs, copied at
// its end.
type endedCall struct {
	observe MethodObserver
	method  string
	start   time.Time
	code    codes.Code
	msg     string
	route   route
}

// upstream is one connection from a session to a runtime endpoint or to
// crishim's own gRPC server.
type upstream struct {
	c        *h2conn
	route    route
	streams  map[uint32]*stream // by upstream stream ID
	nextID   uint32
	draining bool
	dialing  bool // writes wait in memory (see session.upstream)
}

// stream is one relayed call: a client stream paired with an upstream one.
// All of it is under the session's mu.
type stream struct {
	// Set when the call opens.
	cid, uid   uint32
	up         *upstream
	route      route
	method     string
	start      time.Time
	observe    MethodObserver
	notFoundOK func(string) // NotFoundIsOK

	// The call's state.
	toUp, toClient flow
	headersSent    bool // response headers went to the client
	over           bool
	code           codes.Code
	msg            string // grpc-message as on the wire
}

// shutdownPing tells the PING ack that ends the first phase of a graceful
// GOAWAY apart from others.
var shutdownPing = [8]byte{'c', 'r', 'i', 's', 'h', 'i', 'm', '!'}

// goAwayTimeout bounds how long the second GOAWAY of a graceful close
// waits for the client's ack of the PING sent with the first: until it
// goes, the client may still open streams, so a client that never acks
// (stuck, or hostile) would hold shutdown until its deadline. grpc-go's
// server waits 5 s the same way (http2_server.go, outgoingGoAwayHandler).
const goAwayTimeout = 5 * time.Second

// handshakeTimeout bounds how long a connection may take to send its
// preface; it only keeps a silent peer from holding a goroutine forever.
const handshakeTimeout = 10 * time.Second

func newSession(r *relay, nc net.Conn) *session {
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{
		r:        r,
		client:   newH2conn(nc, idleBufSize),
		ctx:      ctx,
		cancel:   cancel,
		streams:  map[uint32]*stream{},
		draining: map[*upstream]struct{}{},
	}
	// Buffered now, so that a GOAWAY from Shutdown can only follow it.
	s.client.writeOurSettings(true)
	s.conns = []*h2conn{s.client}
	s.client.tap = &continuationTap{}
	return s
}

// kill closes every connection of the session at once, without waiting
// for anything: the readers then fail and clean up.
func (s *session) kill() {
	s.cancel() // a dial in progress
	s.connMu.Lock()
	s.killed = true
	for _, c := range s.conns {
		c.close()
	}
	s.connMu.Unlock()
}

// addConn gives a dialed upstream connection its socket nc and adds it for
// kill; false if the session was killed meanwhile (nc is then closed).
func (s *session) addConn(c *h2conn, nc net.Conn) bool {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.killed || !c.setConn(nc) {
		_ = nc.Close()
		return false
	}
	s.conns = append(s.conns, c)
	return true
}

// dropConn forgets an upstream connection that is gone.
func (s *session) dropConn(c *h2conn) {
	s.connMu.Lock()
	s.conns = slices.DeleteFunc(s.conns, func(d *h2conn) bool { return d == c })
	s.connMu.Unlock()
}

func (s *session) run() {
	defer s.teardown()
	c := s.client
	// Who the client is, once per connection: for the gRPC server's calls
	// (the in-memory connections carry it), and for the relay's own
	// choice between the kubelet's path and everyone else's.
	p := s.r.identify(c.nc)
	s.ctx = caller.NewContext(s.ctx, p)
	s.other = !p.IsKubelet()
	c.flush()
	_ = c.nc.SetReadDeadline(time.Now().Add(handshakeTimeout))
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(c.br, preface[:]); err != nil || string(preface[:]) != http2.ClientPreface {
		return
	}
	f, err := c.readFrame()
	if err != nil {
		return
	}
	if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		// RFC 9113 §3.4: a preface not followed by SETTINGS MUST be
		// treated as a connection error of type PROTOCOL_ERROR.
		s.connError(connError(http2.ErrCodeProtocol, reasonFraming, "the preface is not followed by SETTINGS"))
		return
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	for {
		s.mu.Lock()
		err = s.onClientFrame(f)
		s.mu.Unlock()
		if err != nil {
			s.connError(err)
			return
		}
		for {
			if !c.frameReady() {
				s.flushAll(c)
				c.growBuffers()
			}
			f, err = c.readFrame()
			if err == nil {
				break
			}
			var se http2.StreamError
			if !errors.As(err, &se) {
				break
			}
			s.mu.Lock()
			s.resetClient(se)
			err = s.guard.idleFrame()
			s.mu.Unlock()
			if err != nil {
				break
			}
		}
		if err != nil {
			s.connError(err)
			return
		}
	}
}

// connError answers a protocol violation with GOAWAY; other errors (the
// client hung up) need no answer.
func (s *session) connError(err error) {
	pe, ok := asProtoError(err, s.client.fr)
	if !ok {
		return
	}
	s.mu.Lock()
	last := s.lastCID
	s.protocolError(s.client, pe.reason, pe.code, 0, pe.detail)
	s.mu.Unlock()
	debug := pe.debug
	if debug == "" {
		debug = "crishim: " + pe.code.String()
	}
	s.client.writeGoAway(last, pe.code, debug)
	s.client.flush()
}

// teardown ends the session once the client connection is gone: calls
// still open end with it, and closing the upstream connections cancels
// them in the runtime.
func (s *session) teardown() {
	// Closing every connection first frees an upstream reader stuck
	// writing under mu.
	s.kill()
	s.mu.Lock()
	if s.goAwayTimer != nil {
		s.goAwayTimer.Stop()
	}
	for st := range s.openStreams(nil) {
		st.code, st.msg = codes.Canceled, "the client connection closed"
		s.finish(st)
	}
	s.mu.Unlock()
	s.reportPending()
	s.wg.Wait()
}

// flushAll writes out every connection's buffer. Readers call it before
// they block, which covers both what they relayed and the control frames
// they answered. The reader's own connection goes last: what it relayed is
// on the critical path, its PING and SETTINGS acks are not. The calls
// started and ended meanwhile are counted after the writes.
func (s *session) flushAll(own *h2conn) {
	var buf [numRoutes + 3]*h2conn
	conns := buf[:0]
	s.mu.Lock()
	if s.client != own {
		conns = append(conns, s.client)
	}
	for _, up := range s.ups {
		if up != nil && up.c != own {
			conns = append(conns, up.c)
		}
	}
	for up := range s.draining {
		if up.c != own {
			conns = append(conns, up.c)
		}
	}
	// What the other reader adds from now on, it reports itself.
	pending := len(s.started) > 0 || len(s.ended) > 0
	s.mu.Unlock()
	for _, c := range append(conns, own) {
		c.flush()
	}
	if pending {
		s.reportPending()
	}
}

// reportPending counts the calls started and ended since the last time.
// The starts are counted under mu: a call's end is taken under mu after its
// start was recorded, so counting starts before taking the ends keeps the
// in-flight gauge from ever dipping below zero, whichever reader gets here
// first.
func (s *session) reportPending() {
	var endedBuf [4]endedCall
	s.mu.Lock()
	for _, o := range s.started {
		o.Started()
	}
	clear(s.started)
	s.started = s.started[:0]
	ended := s.takeEnded(endedBuf[:0])
	s.mu.Unlock()
	s.report(ended)
}

// takeEnded appends the ended calls to buf and forgets them. Callers
// hold mu.
func (s *session) takeEnded(buf []endedCall) []endedCall {
	buf = append(buf, s.ended...)
	clear(s.ended)
	s.ended = s.ended[:0]
	return buf
}

// report counts and logs ended calls.
func (s *session) report(ended []endedCall) {
	for _, st := range ended {
		if st.observe != nil {
			st.observe.Ended(st.code, time.Since(st.start))
		}
		if st.route != routeLocal {
			logRelayed(context.Background(), s.r.log, st.method, st.start, st.code, decodeGrpcMessage(st.msg))
		}
	}
}

// goAway starts a graceful close: GOAWAY with the highest stream ID and a
// PING, then, once the PING comes back (every stream the client sent before
// is known by then) or goAwayTimeout has passed, GOAWAY with the real last
// stream ID. Calls in flight go on; the connection closes when the last one
// ends.
func (s *session) goAway() {
	s.mu.Lock()
	if !s.goAway1 {
		s.goAway1 = true
		s.client.writeGoAway(h2MaxStreamID, http2.ErrCodeNo, "")
		s.client.writePing(false, shutdownPing)
		s.goAwayTimer = time.AfterFunc(s.r.goAwayTimeout, func() {
			s.mu.Lock()
			s.lastGoAway()
			s.mu.Unlock()
			s.client.flush()
		})
	}
	s.mu.Unlock()
	s.client.flush()
}

// lateRefusalWait bounds how long a connection accepted as Shutdown began is
// read before it is closed (refuseLate).
const lateRefusalWait = time.Second

// refuseLate ends a session that was accepted as Shutdown began, before it
// ran. Closed unread, its socket would reset its client (a unix socket
// closed with unread data gives its peer ECONNRESET), failing every call the
// client had waiting for the connection. Instead it gets our SETTINGS
// (queued by newSession) and a GOAWAY that takes no stream, so its client
// retries those calls on a new connection, which the listening socket
// queues for the next crishim when systemd holds it; then what the client
// sends is read and dropped until it closes, or lateRefusalWait passes.
// Called by the accept loop, which Shutdown waits for: bounded and owned.
func (s *session) refuseLate() {
	defer s.cancel()
	c := s.client
	s.mu.Lock()
	c.writeGoAway(0, http2.ErrCodeNo, "crishim is shutting down")
	s.mu.Unlock()
	c.flush()
	_ = c.nc.SetReadDeadline(time.Now().Add(lateRefusalWait))
	_, _ = io.Copy(io.Discard, c.nc)
	_ = c.nc.Close()
}

// lastGoAway sends the second GOAWAY of a graceful close, once: from now on
// new streams are refused. Callers hold mu.
func (s *session) lastGoAway() {
	if s.goAway2 {
		return
	}
	s.goAway2 = true
	s.goAwayTimer.Stop()
	s.client.writeGoAway(s.lastCID, http2.ErrCodeNo, "crishim is shutting down")
	if s.openCount() == 0 {
		s.client.flushAndClose()
	}
}

func (s *session) onClientFrame(f http2.Frame) error {
	c := s.client
	switch f := f.(type) {
	case *http2.DataFrame:
		return s.onClientData(f)
	case *http2.MetaHeadersFrame:
		return s.onClientHeaders(f)
	case *http2.WindowUpdateFrame:
		return s.onWindowUpdate(c, f, nil)
	case *http2.SettingsFrame:
		if err := s.guard.idleFrame(); err != nil {
			return err
		}
		return s.onSettings(c, f, nil)
	case *http2.PingFrame:
		if !f.IsAck() {
			// Policed before it is answered (see floodGuard.ping).
			if err := s.guard.ping(c.ackPing(f.Data)); err != nil {
				return err
			}
		} else if f.Data == shutdownPing && s.goAway1 {
			s.lastGoAway()
		}
	case *http2.RSTStreamFrame:
		if err := s.guard.idleFrame(); err != nil {
			return err
		}
		st := s.clientStream(f.StreamID)
		if st == nil {
			if f.StreamID > s.lastCID {
				// RFC 9113 §6.4: RST_STREAM on an idle stream MUST be
				// treated as a connection error of type PROTOCOL_ERROR.
				return connError(http2.ErrCodeProtocol, reasonStreamState, "RST_STREAM on an idle stream")
			}
			return nil
		}
		if !st.upstreamClosed() {
			st.up.c.writeRST(st.uid, f.ErrCode)
		}
		st.code, st.msg = rstCode(f.ErrCode), "the client reset the stream: "+f.ErrCode.String()
		s.finish(st)
	case *http2.PushPromiseFrame:
		// RFC 9113 §8.4: a client cannot push; PUSH_PROMISE from it MUST
		// be treated as a connection error of type PROTOCOL_ERROR.
		return connError(http2.ErrCodeProtocol, reasonStreamState, "PUSH_PROMISE from a client")
	}
	// GOAWAY from the client needs nothing: it closes the connection when
	// its calls are done. PRIORITY and unknown frames are ignored, and
	// counted: a stream of them is only work.
	return s.guard.idleFrame()
}

func (s *session) onClientHeaders(mh *http2.MetaHeadersFrame) error {
	c := s.client
	id := mh.StreamID
	if id%2 == 0 {
		// RFC 9113 §5.1.1: a stream ID the client may not open MUST be
		// treated as a connection error of type PROTOCOL_ERROR.
		return connError(http2.ErrCodeProtocol, reasonStreamState, fmt.Sprintf("HEADERS on even stream %d", id))
	}
	if id <= s.lastCID {
		st := s.clientStream(id)
		if st == nil {
			return nil // a stream crishim already ended
		}
		// Trailers from the client: legal, though gRPC clients send none.
		if mh.Truncated {
			s.listTooLong(id)
			s.abort(st, http2.ErrCodeFrameSize, codes.Internal, "crishim: the client's trailers are over the header list size limit")
			return nil
		}
		if !mh.StreamEnded() || st.toUp.srcEnded {
			// RFC 9113 §8.1: a second HEADERS without END_STREAM, or after
			// it, MUST be treated as malformed: a stream error of type
			// PROTOCOL_ERROR (§8.1.1).
			s.protocolError(c, reasonStreamState, http2.ErrCodeProtocol, id, "unexpected HEADERS")
			s.abort(st, http2.ErrCodeProtocol, codes.Internal, "crishim: unexpected HEADERS from the client")
			return nil
		}
		st.toUp.endWith(mh.Fields)
		s.settle(st)
		return nil
	}
	s.lastCID = id
	end := mh.StreamEnded()
	if s.goAway2 || s.openCount() >= relayMaxStreams {
		c.writeRST(id, http2.ErrCodeRefusedStream)
		return nil
	}
	if mh.Truncated {
		s.listTooLong(id)
		c.writeRST(id, http2.ErrCodeFrameSize)
		return nil
	}
	path := mh.PseudoValue("path")
	if path == "" {
		// RFC 9113 §8.3.1: a request without :path is malformed, a stream
		// error of type PROTOCOL_ERROR (§8.1.1).
		s.protocolError(c, reasonHeaders, http2.ErrCodeProtocol, id, "a request without :path")
		c.writeRST(id, http2.ErrCodeProtocol)
		return nil
	}
	pi := s.lastInfo
	if pi == nil || path != s.lastPath {
		pi = s.r.paths.lookup(path)
		s.lastPath, s.lastInfo = path, pi
	}
	if s.other {
		pi = pi.other
	}
	if pi.refused != "" {
		return s.refuse(id, path, end, pi.refused)
	}
	rt, observe := pi.route, pi.observe
	if pi.localIf != nil && pi.localIf() {
		rt, observe = routeLocal, nil // crishim's gRPC server counts it
	}
	up := s.upstream(rt)
	if uint32(s.openOn(up)) >= up.c.peerMaxStreams || up.dialing && up.c.pendingFull() {
		c.writeRST(id, http2.ErrCodeRefusedStream)
		return nil
	}
	st := &stream{cid: id, uid: up.nextID, up: up, method: path, route: rt, start: time.Now(),
		code: codes.Unknown, msg: "crishim: the call ended without a grpc-status"}
	up.nextID += 2
	st.toUp.init(st, c, up.c, id, st.uid)
	st.toClient.init(st, up.c, c, st.uid, id)
	st.toClient.rewrite, st.notFoundOK, st.observe = pi.rewrite, pi.notFoundOK, observe
	s.open(st)
	c.grow = c.bw.Size() < ioBufSize
	if st.observe != nil {
		s.started = append(s.started, st.observe)
	}
	up.c.writeHeaders(st.uid, mh.Fields, end)
	if end {
		st.toUp.srcEnded, st.toUp.dstEnded = true, true
	}
	if up.nextID > h2MaxStreamID {
		// Out of stream IDs: the next call dials afresh. Only now, with
		// this call open on it, or retiring would close the connection
		// under it.
		s.retire(up)
	}
	return nil
}

func (s *session) onClientData(f *http2.DataFrame) error {
	c := s.client
	n := int64(f.Length)
	if !c.recv.take(n) {
		// RFC 9113 §6.9.1: a sender MUST NOT send beyond the window; a
		// connection overrun is a connection error FLOW_CONTROL_ERROR.
		return connError(http2.ErrCodeFlowControl, reasonFlowControl, "the client overran the connection window")
	}
	st := s.clientStream(f.StreamID)
	if st == nil {
		if f.StreamID > s.lastCID {
			// RFC 9113 §6.1: DATA on an idle stream MUST be treated as a
			// connection error of type PROTOCOL_ERROR.
			return connError(http2.ErrCodeProtocol, reasonStreamState, fmt.Sprintf("DATA on idle stream %d", f.StreamID))
		}
		// A call crishim already ended: the bytes count only against the
		// connection, which must get them back.
		c.credit(n)
		return nil
	}
	fl := &st.toUp
	switch {
	case fl.srcEnded:
		// RFC 9113 §6.1: DATA on a half-closed (remote) stream MUST be
		// answered with a stream error of type STREAM_CLOSED.
		c.credit(n)
		s.protocolError(c, reasonStreamState, http2.ErrCodeStreamClosed, st.cid, "DATA after END_STREAM")
		s.abort(st, http2.ErrCodeStreamClosed, codes.Internal, "crishim: DATA after the end of the stream")
		return nil
	case !fl.in.take(n):
		// RFC 9113 §6.9.1: a stream overrun is FLOW_CONTROL_ERROR.
		c.credit(n)
		s.protocolError(c, reasonFlowControl, http2.ErrCodeFlowControl, st.cid, "the client overran a stream window")
		s.abort(st, http2.ErrCodeFlowControl, codes.Internal, "crishim: the client overran its flow-control window")
		return nil
	}
	data := f.Data()
	if len(data) == 0 && !f.StreamEnded() {
		if err := s.guard.idleFrame(); err != nil {
			return err
		}
	}
	if !s.admit(st, fl, n, data) {
		return nil
	}
	fl.forward(data, f.StreamEnded())
	s.settle(st)
	return nil
}

// listTooLong counts a client's header block over maxHeaderListSize on
// stream id, which the caller resets. The block was decoded no further
// than the limit (see headerReader). grpc-go's server answers such a
// request with RST_STREAM(FRAME_SIZE_ERROR) (http2_server.go,
// operateHeaders), and so does crishim; a grpc-go client, told the limit
// by SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 §6.5.2), does not send it but
// fails the call with Internal.
func (s *session) listTooLong(id uint32) {
	s.protocolError(s.client, reasonHeaders, http2.ErrCodeFrameSize, id,
		fmt.Sprintf("a header list over %d bytes", maxHeaderListSize))
}

// resetClient answers a malformed frame on one stream.
func (s *session) resetClient(se http2.StreamError) {
	id, code := se.StreamID, se.Code
	s.protocolError(s.client, streamErrorReason(se), code, id, se.Error())
	if st := s.clientStream(id); st != nil {
		s.abort(st, code, codes.Internal, "crishim: malformed frame from the client")
		return
	}
	if id%2 == 1 && id > s.lastCID {
		s.lastCID = id
	}
	s.client.writeRST(id, code)
}

// refuse answers a call crishim will not route (see refusedMethod) with Unimplemented as
// trailers-only, reports it like a relayed call, and counts it against the flood guard: a
// refused call relays nothing, so a stream of them is a flood like any other.
func (s *session) refuse(id uint32, method string, clientEnded bool, msg string) error {
	s.client.writeHeaders(id, statusFields(codes.Unimplemented, msg, false), true)
	if !clientEnded {
		s.client.writeRST(id, http2.ErrCodeNo)
	}
	if s.r.observe != nil {
		o := s.r.observe.Method(method)
		o.Started()
		o.Ended(codes.Unimplemented, 0)
	}
	logRelayed(context.Background(), s.r.log, method, time.Now(), codes.Unimplemented, msg)
	return s.guard.idleFrame()
}

// unblock sends what waited for c's connection window.
func (s *session) unblock(c *h2conn) {
	blocked := c.blocked
	c.blocked = nil
	for _, f := range blocked {
		f.queued = false
	}
	for _, f := range blocked {
		if !f.st.over {
			f.pump()
			s.settle(f.st)
		}
	}
}

// settle ends the call once the client has its end of stream, as a gRPC
// server does: a client still sending gets RST_STREAM(NO_ERROR).
func (s *session) settle(st *stream) {
	if st.over || !st.toClient.dstEnded {
		return
	}
	if !st.toUp.srcEnded {
		s.client.writeRST(st.cid, http2.ErrCodeNo)
	}
	if !st.upstreamClosed() {
		st.up.c.writeRST(st.uid, http2.ErrCodeCancel)
	}
	s.finish(st)
}

// upstreamClosed says whether the upstream stream is closed both ways, so
// that it needs no RST_STREAM.
func (st *stream) upstreamClosed() bool {
	return st.toUp.dstEnded && st.toClient.srcEnded
}

// abort resets the call on both sides.
func (s *session) abort(st *stream, code http2.ErrCode, status codes.Code, msg string) {
	s.client.writeRST(st.cid, code)
	if !st.upstreamClosed() {
		st.up.c.writeRST(st.uid, http2.ErrCodeCancel)
	}
	st.code, st.msg = status, encodeGrpcMessage(msg)
	s.finish(st)
}

// endLocally ends the call with a status of crishim's own, after the
// response headers if they went out, as trailers-only otherwise.
func (s *session) endLocally(st *stream, code codes.Code, msg string) {
	if !st.upstreamClosed() {
		st.up.c.writeRST(st.uid, http2.ErrCodeCancel)
	}
	st.toClient.drop()
	if !st.toClient.dstEnded {
		s.client.writeHeaders(st.cid, statusFields(code, msg, st.headersSent), true)
		st.toClient.dstEnded = true
	}
	if !st.toUp.srcEnded {
		s.client.writeRST(st.cid, http2.ErrCodeNo)
	}
	st.code, st.msg = code, encodeGrpcMessage(msg)
	s.finish(st)
}

// finish forgets a call and reports it.
func (s *session) finish(st *stream) {
	if st.over {
		return
	}
	st.over = true
	if st.toClient.dstEnded {
		s.guard.callDone()
	}
	st.toUp.drop()
	st.toClient.drop()
	s.forget(st)
	up := st.up
	if up.draining && s.openOn(up) == 0 {
		up.c.flushAndClose()
	}
	s.ended = append(s.ended, endedCall{observe: st.observe, method: st.method, start: st.start, code: st.code, msg: st.msg, route: st.route})
	if s.goAway2 && s.openCount() == 0 {
		s.client.flushAndClose()
	}
}

// retire stops new calls from using up; it closes when its calls are done.
func (s *session) retire(up *upstream) {
	if !up.draining {
		up.draining = true
		if s.ups[up.route] == up {
			s.ups[up.route] = nil
		}
		s.draining[up] = struct{}{}
	}
	if s.openOn(up) == 0 {
		up.c.flushAndClose()
	}
}
