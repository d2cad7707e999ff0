package proxy

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestStreamWindowOverflowIsAFlowControlError: RFC 9113 §6.9.1, a
// WINDOW_UPDATE that takes a stream's window past 2^31-1 resets the
// stream with FLOW_CONTROL_ERROR; the connection stays.
func TestStreamWindowOverflowIsAFlowControlError(t *testing.T) {
	sock := fakeSock(t)
	// A runtime that takes the call and never answers: the stream stays open.
	startRaw(t, sock, func(int, *http2.Framer, *hpack.Encoder, *bytes.Buffer, uint32) {})
	p := startProxy(t, sock)
	c := dialRaw(t, p.sock)
	c.headers(1)
	if err := c.fr.WriteWindowUpdate(1, 1<<31-1); err != nil {
		t.Fatal(err)
	}
	alive := [8]byte{'a', 'l', 'i', 'v', 'e', '?', '?', '?'}
	if err := c.fr.WritePing(false, alive); err != nil {
		t.Fatal(err)
	}
	var rst *http2.RSTStreamFrame
	for {
		switch f := c.next(t, func(http2.Frame) bool { return true }).(type) {
		case *http2.RSTStreamFrame:
			rst = f
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY(%v): a stream's window is a stream error", f.ErrCode)
		case *http2.PingFrame:
			if f.IsAck() && f.Data == alive {
				if rst == nil || rst.StreamID != 1 || rst.ErrCode != http2.ErrCodeFlowControl {
					t.Fatalf("before the PING's ack: RST_STREAM %+v, want stream 1 FLOW_CONTROL_ERROR", rst)
				}
				return
			}
		}
	}
}
