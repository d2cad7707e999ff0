package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/sys/unix"
)

// Protocol error warnings are rate-limited: a peer that keeps making them (a
// broken or hostile client reconnecting in a loop) must not flood the journal
// with one line each. The first warnBurst of each warnInterval are logged;
// the rest are only counted (crishim_relay_protocol_errors_total counts every
// one), and the next warning logged says how many were left out. Ten a minute
// is more than any working client makes and few enough to read.
const (
	warnBurst    = 10
	warnInterval = time.Minute
)

// Reasons under which crishim_relay_protocol_errors_total counts a peer's
// protocol errors: a fixed set, so that no peer can grow the label.
const (
	reasonFrameSize   = "frame_size"   // a frame over the size crishim advertised, or of a wrong fixed size
	reasonFlowControl = "flow_control" // a window overrun, or opened past 2^31-1
	reasonStreamState = "stream_state" // a frame its stream's state or ID forbids
	reasonHeaders     = "headers"      // a header block that does not decode or is not a request
	reasonSettings    = "settings"     // a SETTINGS value out of range
	reasonFraming     = "framing"      // any other malformed frame
	reasonFlood       = "flood"        // too many frames that do no work: ENHANCE_YOUR_CALM
)

// ProtocolErrorReasons are every value of the reason label, for
// collectors that want the series to exist at zero.
var ProtocolErrorReasons = []string{reasonFrameSize, reasonFlowControl, reasonStreamState,
	reasonHeaders, reasonSettings, reasonFraming, reasonFlood}

// protoError is a peer's protocol error that ends its connection (RFC 9113
// §5.4.1): it is answered with GOAWAY(code) and counted under reason.
type protoError struct {
	code   http2.ErrCode
	reason string
	detail string
	debug  string // GOAWAY debug data, when not the default
}

func (e protoError) Error() string { return fmt.Sprintf("%v (%s): %s", e.code, e.reason, e.detail) }

func connError(code http2.ErrCode, reason, detail string) error {
	return protoError{code: code, reason: reason, detail: detail}
}

// asProtoError says whether err, from a handler or from the framer fr, is
// a protocol error of the peer's, to be answered with GOAWAY.
func asProtoError(err error, fr *http2.Framer) (protoError, bool) {
	var pe protoError
	if errors.As(err, &pe) {
		return pe, true
	}
	if errors.Is(err, http2.ErrFrameTooLarge) {
		// RFC 9113 §4.2: MUST be treated as a connection error of type
		// FRAME_SIZE_ERROR.
		return protoError{code: http2.ErrCodeFrameSize, reason: reasonFrameSize, detail: err.Error()}, true
	}
	var ce http2.ConnectionError
	if !errors.As(err, &ce) {
		return protoError{}, false // the peer hung up, or a read failed
	}
	pe = protoError{code: http2.ErrCode(ce), reason: reasonFraming, detail: err.Error()}
	if d := fr.ErrorDetail(); d != nil {
		pe.detail = d.Error()
	}
	switch pe.code {
	case http2.ErrCodeFrameSize:
		pe.reason = reasonFrameSize
	case http2.ErrCodeFlowControl:
		pe.reason = reasonFlowControl
	case http2.ErrCodeCompression:
		pe.reason = reasonHeaders
	}
	return pe, true
}

// streamErrorReason is the reason of a stream error the framer found.
func streamErrorReason(se http2.StreamError) string {
	if se.Cause != nil {
		return reasonHeaders // a header field or pseudo-header that is not allowed
	}
	return reasonFraming
}

// ProtocolErrorObserver hears about the protocol errors of the relay's
// peers, which crishim answers with GOAWAY or RST_STREAM
// (metrics.Metrics is one).
type ProtocolErrorObserver interface {
	ProtocolError(reason string)
}

// protocolError counts and logs a protocol error of c's peer, answered
// with code on stream id (0: GOAWAY). Every one is counted; the warnings
// are rate-limited (package warnlimit): a peer reconnecting in a loop pays a
// connection per error, which is cheap, and must not flood the journal.
func (s *session) protocolError(c *h2conn, reason string, code http2.ErrCode, id uint32, detail string) {
	if o := s.r.protoErrs; o != nil {
		o.ProtocolError(reason)
	}
	log := s.r.log
	if log == nil {
		return
	}
	ok, suppressed := s.r.protoWarn.Allow()
	if !ok {
		return
	}
	if suppressed > 0 {
		log.LogAttrs(context.Background(), slog.LevelWarn, "protocol errors from peers of the relay not logged (rate limit); crishim_relay_protocol_errors_total counts them all",
			slog.Int("suppressed", suppressed), slog.Int("logged_per_interval", s.r.protoWarn.Burst()), slog.Duration("interval", s.r.protoWarn.Interval()))
	}
	peer := "client"
	if c != s.client {
		peer = "runtime"
		for _, up := range s.ups {
			if up != nil && up.c == c {
				peer = s.r.endpoints[up.route].name
			}
		}
	}
	attrs := []slog.Attr{slog.String("peer", peer)}
	attrs = append(attrs, peerCred(c.nc)...)
	attrs = append(attrs, slog.String("reason", reason), slog.String("code", code.String()))
	if id != 0 {
		attrs = append(attrs, slog.Uint64("stream", uint64(id)))
	}
	attrs = append(attrs, slog.String("err", detail))
	answer := "GOAWAY"
	if id != 0 {
		answer = "RST_STREAM"
	}
	log.LogAttrs(context.Background(), slog.LevelWarn, "protocol error from a peer of the relay, answered with "+answer, attrs...)
}

// peerCred says which process is at the other end of a unix socket: its
// address says nothing.
func peerCred(nc net.Conn) []slog.Attr {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var cred *unix.Ucred
	_ = rc.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cred == nil || err != nil {
		return nil
	}
	return []slog.Attr{slog.Int("pid", int(cred.Pid)), slog.Int("uid", int(cred.Uid))}
}
