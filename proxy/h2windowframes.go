package proxy

import (
	"errors"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// toward is st's flow toward up's connection (the client's if nil), for the
// frames that connection sends about its windows.
func (st *stream) toward(up *upstream) *flow {
	if up == nil {
		return &st.toClient
	}
	return &st.toUp
}

// onWindowUpdate opens a send window toward c, the connection of up (the
// client's if nil): the connection's, or that of the stream with the
// frame's ID (c's stream IDs).
func (s *session) onWindowUpdate(c *h2conn, f *http2.WindowUpdateFrame, up *upstream) error {
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		if !c.send.add(inc) {
			// RFC 9113 §6.9.1: a connection window past 2^31-1 MUST be
			// a connection error of type FLOW_CONTROL_ERROR.
			return connError(http2.ErrCodeFlowControl, reasonFlowControl, "WINDOW_UPDATE overflowed the connection window")
		}
		s.unblock(c)
		return nil
	}
	st := s.streamOn(up, f.StreamID)
	if st == nil {
		return nil
	}
	fl := st.toward(up)
	if !fl.out.add(inc) {
		s.windowOverflow(c, st)
		return nil
	}
	fl.pump()
	s.settle(st)
	return nil
}

// onSettings takes in c's SETTINGS, those of up's connection (the client's
// if nil): a changed initial window moves the send windows of every open
// stream toward c by the difference.
func (s *session) onSettings(c *h2conn, f *http2.SettingsFrame, up *upstream) error {
	if f.IsAck() {
		return nil
	}
	delta, err := c.applySettings(f)
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		// RFC 9113 §6.5.2: values out of range (ENABLE_PUSH not 0 or 1,
		// INITIAL_WINDOW_SIZE over 2^31-1, MAX_FRAME_SIZE out of
		// [2^14, 2^24-1]) MUST be treated as connection errors.
		return connError(http2.ErrCode(ce), reasonSettings, err.Error())
	}
	if err != nil {
		return err
	}
	c.writeSettingsAck()
	if delta == 0 {
		return nil
	}
	for st := range s.openStreams(up) {
		fl := st.toward(up)
		if !fl.out.add(delta) {
			// RFC 9113 §6.9.2: an INITIAL_WINDOW_SIZE change that takes a
			// window past 2^31-1 MUST be a connection error of type
			// FLOW_CONTROL_ERROR.
			return connError(http2.ErrCodeFlowControl, reasonFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE overflowed a stream window")
		}
		if delta > 0 {
			fl.pump()
			s.settle(st)
		}
	}
	return nil
}

// windowOverflow answers a WINDOW_UPDATE from c that took a stream's
// window past 2^31-1: RFC 9113 §6.9.1, the sender MUST send RST_STREAM
// with FLOW_CONTROL_ERROR.
func (s *session) windowOverflow(c *h2conn, st *stream) {
	id := st.uid
	if c == s.client {
		id = st.cid
	}
	s.protocolError(c, reasonFlowControl, http2.ErrCodeFlowControl, id, "WINDOW_UPDATE overflowed a stream window")
	if c == s.client {
		s.abort(st, http2.ErrCodeFlowControl, codes.Internal, "crishim: the client overflowed a stream's flow-control window")
		return
	}
	c.writeRST(st.uid, http2.ErrCodeFlowControl)
	st.toUp.dstEnded, st.toClient.srcEnded = true, true
	s.endLocally(st, codes.Internal, "crishim: the "+s.r.endpoints[st.route].name+" overflowed a stream's flow-control window")
}
