package proxy

import (
	"encoding/binary"
	"testing"
)

// FuzzMsgLimit checks the gRPC length-prefix scanner that keeps the
// message size limit without decoding: fed in any chunks, it must find
// the first message over the limit exactly as a whole-stream parse does.
func FuzzMsgLimit(f *testing.F) {
	msg := func(n int) []byte {
		b := make([]byte, 5+n)
		binary.BigEndian.PutUint32(b[1:], uint32(n))
		return b
	}
	f.Add(msg(3), uint16(100), uint8(1))
	f.Add(append(msg(10), msg(200)...), uint16(100), uint8(7))
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff}, uint16(0), uint8(2))
	f.Fuzz(func(t *testing.T, stream []byte, limit uint16, chunk uint8) {
		wantSize, wantOver := parseMsgs(stream, int(limit))
		var m msgLimit
		step := int(chunk)%17 + 1
		var gotSize uint32
		gotOver := false
		for p := stream; len(p) > 0 && !gotOver; {
			n := min(step, len(p))
			gotSize, gotOver = m.scan(p[:n], int(limit))
			p = p[n:]
		}
		if gotOver != wantOver || gotSize != wantSize {
			t.Fatalf("scan in %d-byte chunks: %d, %v; whole parse: %d, %v", step, gotSize, gotOver, wantSize, wantOver)
		}
	})
}

// parseMsgs is the plain reading of a gRPC message stream: the length of
// the first message over limit.
func parseMsgs(p []byte, limit int) (uint32, bool) {
	for len(p) >= 5 {
		size := binary.BigEndian.Uint32(p[1:5])
		if int64(size) > int64(limit) {
			return size, true
		}
		p = p[5:]
		if uint64(len(p)) < uint64(size) {
			return 0, false
		}
		p = p[size:]
	}
	return 0, false
}
