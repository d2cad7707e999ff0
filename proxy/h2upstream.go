package proxy

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// readUpstream is an upstream connection's reader: it relays what the
// runtime (or crishim's gRPC server) answers to the client.
func (s *session) readUpstream(up *upstream) {
	c := up.c
	var err error
	for err == nil {
		if !c.frameReady() {
			s.flushAll(c)
		}
		var f http2.Frame
		if f, err = c.readFrame(); err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				s.mu.Lock()
				s.protocolError(c, streamErrorReason(se), se.Code, se.StreamID, se.Error())
				if st := up.stream(se.StreamID); st != nil {
					s.endLocally(st, codes.Internal, "crishim: malformed frame from the "+s.r.endpoints[up.route].name+": "+se.Error())
				}
				s.mu.Unlock()
				err = nil
			}
			continue
		}
		s.mu.Lock()
		err = s.onUpstreamFrame(up, f)
		s.mu.Unlock()
	}
	if pe, ok := asProtoError(err, c.fr); ok {
		// RFC 9113 §5.4.1: an endpoint that encounters a connection error
		// SHOULD first send a GOAWAY frame.
		s.mu.Lock()
		s.protocolError(c, pe.reason, pe.code, 0, pe.detail)
		s.mu.Unlock()
		c.writeGoAway(0, pe.code, "crishim: "+pe.code.String())
		c.flush()
	}
	c.close()
	s.dropConn(c)
	s.mu.Lock()
	s.upstreamGone(up, err)
	s.mu.Unlock()
	s.flushAll(s.client)
}

func (s *session) onUpstreamFrame(up *upstream, f http2.Frame) error {
	c := up.c
	switch f := f.(type) {
	case *http2.DataFrame:
		return s.onUpstreamData(up, f)
	case *http2.MetaHeadersFrame:
		st := up.stream(f.StreamID)
		if st == nil {
			return nil
		}
		if f.Truncated {
			// Over maxHeaderListSize: as grpc-go's client does
			// (http2_client.go, operateHeaders), RST_STREAM(FRAME_SIZE_ERROR)
			// to the runtime and Internal to the caller.
			s.protocolError(c, reasonHeaders, http2.ErrCodeFrameSize, st.uid, fmt.Sprintf("a header list over %d bytes", maxHeaderListSize))
			c.writeRST(st.uid, http2.ErrCodeFrameSize)
			st.toUp.dstEnded, st.toClient.srcEnded = true, true
			s.endLocally(st, codes.Internal, fmt.Sprintf("crishim: a header list over the %d-byte limit from the %s", maxHeaderListSize, s.r.endpoints[up.route].name))
			return nil
		}
		if f.StreamEnded() {
			st.code, st.msg = callStatus(f.Fields)
			if st.notFoundOK != nil && st.code == codes.NotFound && !st.headersSent {
				st.notFoundOK(decodeGrpcMessage(st.msg))
				s.answerOK(st)
				return nil
			}
			st.toClient.endWith(f.Fields)
			s.settle(st)
			return nil
		}
		s.client.writeHeaders(st.cid, f.Fields, false)
		st.headersSent = true
	case *http2.WindowUpdateFrame:
		return s.onWindowUpdate(c, f, up)
	case *http2.SettingsFrame:
		return s.onSettings(c, f, up)
	case *http2.PingFrame:
		if !f.IsAck() {
			c.ackPing(f.Data)
		}
	case *http2.RSTStreamFrame:
		st := up.stream(f.StreamID)
		if st == nil {
			return nil
		}
		if f.ErrCode == http2.ErrCodeNo && st.toClient.srcEnded {
			// The runtime ended the call and stops listening to the
			// client; what it answered still goes out in full.
			st.toUp.drop()
			st.toUp.dstEnded = true
			return nil
		}
		s.client.writeRST(st.cid, f.ErrCode)
		st.code = rstCode(f.ErrCode)
		st.msg = encodeGrpcMessage("the " + s.r.endpoints[up.route].name + " reset the stream: " + f.ErrCode.String())
		s.finish(st)
	case *http2.GoAwayFrame:
		s.upstreamGoAway(up, f.LastStreamID)
	case *http2.PushPromiseFrame:
		// RFC 9113 §8.4: crishim sent SETTINGS_ENABLE_PUSH 0, so a
		// PUSH_PROMISE MUST be a connection error of type PROTOCOL_ERROR.
		return connError(http2.ErrCodeProtocol, reasonStreamState, "PUSH_PROMISE with push disabled")
	}
	return nil
}

func (s *session) onUpstreamData(up *upstream, f *http2.DataFrame) error {
	c := up.c
	n := int64(f.Length)
	if !c.recv.take(n) {
		// RFC 9113 §6.9.1: FLOW_CONTROL_ERROR, as from a client.
		return connError(http2.ErrCodeFlowControl, reasonFlowControl, "the runtime overran the connection window")
	}
	st := up.stream(f.StreamID)
	if st == nil || st.toClient.srcEnded {
		c.credit(n)
		return nil
	}
	fl := &st.toClient
	if !fl.in.take(n) {
		// RFC 9113 §6.9.1: a stream overrun is FLOW_CONTROL_ERROR.
		c.credit(n)
		s.protocolError(c, reasonFlowControl, http2.ErrCodeFlowControl, st.uid, "the runtime overran a stream window")
		c.writeRST(st.uid, http2.ErrCodeFlowControl)
		st.toUp.dstEnded, st.toClient.srcEnded = true, true
		s.endLocally(st, codes.Internal, "crishim: the "+s.r.endpoints[up.route].name+" overran its flow-control window")
		return nil
	}
	data := f.Data()
	if !s.admit(st, fl, n, data) {
		return nil
	}
	if fl.rewrite != nil {
		fl.forwardRewritten(data, f.StreamEnded())
	} else {
		fl.forward(data, f.StreamEnded())
	}
	s.settle(st)
	return nil
}

// upstreamGoAway retires a connection the runtime is closing: calls it did
// not take are refused to the client (gRPC clients retry those at once, and
// the retry dials afresh), the others finish on it.
func (s *session) upstreamGoAway(up *upstream, last uint32) {
	for st := range s.openStreams(up) {
		if st.uid > last {
			s.client.writeRST(st.cid, http2.ErrCodeRefusedStream)
			st.toUp.dstEnded, st.toClient.srcEnded = true, true
			st.code, st.msg = codes.Unavailable, "the "+s.r.endpoints[up.route].name+" went away before taking the call"
			s.finish(st)
		}
	}
	s.retire(up)
}

// upstreamGone ends the calls of a connection that broke.
func (s *session) upstreamGone(up *upstream, err error) {
	if s.ups[up.route] == up {
		s.ups[up.route] = nil
	}
	delete(s.draining, up)
	if err == nil || errors.Is(err, io.EOF) {
		err = io.EOF
	}
	for st := range s.openStreams(up) {
		if st.toClient.srcEnded {
			// The answer is complete and on its way to the client.
			st.toUp.drop()
			st.toUp.dstEnded = true
			continue
		}
		st.toUp.dstEnded, st.toClient.srcEnded = true, true
		s.endLocally(st, codes.Unavailable, fmt.Sprintf("crishim: lost the connection to the %s: %v", s.r.endpoints[up.route].name, err))
	}
}
