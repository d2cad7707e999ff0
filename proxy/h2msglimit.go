package proxy

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/grpc/codes"
)

// admit takes in a DATA frame of n bytes, padding included, whose payload
// is data: the padding is consumed at once, and a message over the size
// limit ends the call (its bytes go back to src's connection). False: the
// frame goes no further.
func (s *session) admit(st *stream, fl *flow, n int64, data []byte) bool {
	fl.consumed(n - int64(len(data)))
	if st.route == routeLocal {
		return true // crishim's gRPC server keeps the limit itself
	}
	if size, over := fl.msgs.scan(data, s.r.maxMsg); over {
		fl.src.credit(int64(len(data)))
		s.endLocally(st, codes.ResourceExhausted, fmt.Sprintf("grpc: received message larger than max (%d vs. %d)", size, s.r.maxMsg))
		return false
	}
	return true
}

// msgLimit follows the gRPC length prefixes in a stream of DATA payloads,
// so that the message size limit holds without decoding any message.
type msgLimit struct {
	records
}

// scan returns the length of the first message in p larger than max.
func (m *msgLimit) scan(p []byte, max int) (uint32, bool) {
	for {
		h, rest, ok := m.header(p, grpcPrefixLen)
		if !ok {
			return 0, false
		}
		p = rest
		size := binary.BigEndian.Uint32(h[1:])
		if int64(size) > int64(max) {
			return size, true
		}
		m.left = uint64(size)
	}
}
