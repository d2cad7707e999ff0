package proxy

import (
	"strconv"
	"strings"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// statusFields are the trailers of a call crishim ends itself. Without
// response headers before them they form a trailers-only response, which
// needs :status and content-type too.
func statusFields(code codes.Code, msg string, headersSent bool) []hpack.HeaderField {
	var out []hpack.HeaderField
	if !headersSent {
		out = append(out,
			hpack.HeaderField{Name: ":status", Value: "200"},
			hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
	}
	out = append(out, hpack.HeaderField{Name: "grpc-status", Value: strconv.Itoa(int(code))})
	if msg != "" {
		out = append(out, hpack.HeaderField{Name: "grpc-message", Value: encodeGrpcMessage(msg)})
	}
	return out
}

// callStatus reads grpc-status and grpc-message from trailers. A call that
// ends without grpc-status is reported the way grpc-go's client reports it.
func callStatus(fields []hpack.HeaderField) (codes.Code, string) {
	code, msg, seen := codes.Unknown, "", false
	for _, f := range fields {
		switch f.Name {
		case "grpc-status":
			if n, err := strconv.ParseUint(f.Value, 10, 32); err == nil {
				code, seen = codes.Code(n), true
			}
		case "grpc-message":
			msg = f.Value
		}
	}
	if !seen {
		return codes.Unknown, "crishim: the runtime ended the call without a grpc-status"
	}
	return code, msg
}

// rstCode is what a gRPC client makes of RST_STREAM (grpc-go's table).
func rstCode(e http2.ErrCode) codes.Code {
	switch e {
	case http2.ErrCodeRefusedStream:
		return codes.Unavailable
	case http2.ErrCodeCancel:
		return codes.Canceled
	case http2.ErrCodeFlowControl, http2.ErrCodeEnhanceYourCalm:
		return codes.ResourceExhausted
	case http2.ErrCodeInadequateSecurity:
		return codes.PermissionDenied
	}
	return codes.Internal
}

// encodeGrpcMessage percent-encodes a status message as the gRPC spec asks
// (printable ASCII except '%' stays as it is).
func encodeGrpcMessage(msg string) string {
	clean := true
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c < ' ' || c > '~' || c == '%' {
			clean = false
			break
		}
	}
	if clean {
		return msg
	}
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= ' ' && c <= '~' && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte("0123456789ABCDEF"[c>>4])
		b.WriteByte("0123456789ABCDEF"[c&15])
	}
	return b.String()
}

func decodeGrpcMessage(msg string) string {
	if !strings.Contains(msg, "%") {
		return msg
	}
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		if msg[i] == '%' && i+2 < len(msg) {
			if v, err := strconv.ParseUint(msg[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(msg[i])
	}
	return b.String()
}
