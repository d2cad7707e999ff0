package proxy

import (
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// NotFoundIsOK relays a unary method raw, like any pass-through call, and
// answers OK with an empty response message where the runtime answers
// NotFound; notFound gets the runtime's message (to log and count). It
// suits the CRI calls that must be idempotent (stopping or removing what
// is already gone) with runtimes that are not: only the status of the
// answer is looked at, a successful answer goes on as it came. The
// response type must be one whose empty message is the right answer.
//
// notFound runs on the relay's path: it must be quick and must not block.
func NotFoundIsOK(fullMethod string, notFound func(msg string)) Method {
	return Method{FullMethod: fullMethod, notFound: notFound}
}

// notFoundHooks indexes the methods given with NotFoundIsOK.
func notFoundHooks(methods []Method) map[string]func(string) {
	m := map[string]func(string){}
	for _, md := range methods {
		if md.notFound != nil {
			m[md.FullMethod] = md.notFound
		}
	}
	return m
}

// emptyMessage is a gRPC message of zero bytes: the empty response.
var emptyMessage = []byte{0, 0, 0, 0, 0}

var (
	okHeaders  = []hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}
	okTrailers = statusFields(codes.OK, "", true)
)

// answerOK ends a call whose runtime answered NotFound, trailers-only, as
// if it had answered OK with an empty message. The runtime's part of the
// flow is over, so nothing of src is pending; what goes out now is
// crishim's own and must return no window to src, which prepaid flows do
// not (keep is their rewrite: it is never called, no DATA follows).
func (s *session) answerOK(st *stream) {
	fl := &st.toClient
	fl.rewrite = keep
	s.client.writeHeaders(st.cid, okHeaders, false)
	st.headersSent = true
	fl.forward(emptyMessage, false)
	fl.endWith(okTrailers)
	st.code, st.msg = codes.OK, ""
	s.settle(st)
}

func keep(msg []byte) []byte { return msg }
