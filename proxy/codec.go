package proxy

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Frame is one gRPC message kept in wire form. The codec hands a received
// frame's buffers to the next send without copying them, which is what keeps
// pass-through calls cheap and keeps unknown fields intact.
type Frame struct {
	data mem.BufferSlice
}

// Bytes returns a copy of the frame's wire bytes (tests and logging only: the
// relay path never materializes frames).
func (f *Frame) Bytes() []byte { return f.data.Materialize() }

// rewrite passes the frame's message through fn (RewriteResponse). It is the
// one place the gRPC server's relay of audited calls materializes a frame.
func (f *Frame) rewrite(fn Rewrite) {
	msg := f.data.Materialize()
	f.data.Free()
	f.data = mem.BufferSlice{mem.SliceBuffer(fn(msg))}
}

// NewFrame wraps wire bytes in a frame, for tests that send raw messages.
func NewFrame(b []byte) *Frame {
	return &Frame{data: mem.BufferSlice{mem.SliceBuffer(b)}}
}

// codec relays *Frame values as raw bytes and encodes everything else as
// protobuf, so one forced codec serves the raw handler and the intercepted,
// decoded methods alike.
type codec struct {
	proto encoding.CodecV2
}

func newCodec() codec {
	return codec{proto: encoding.GetCodecV2(proto.Name)}
}

// Name is empty on purpose. A client's forced codec names the content
// subtype: "proto" would make every call crishim sends to the runtime
// "application/grpc+proto", while the kubelet's client sends plain
// "application/grpc", and CRI-O (whose socket is served through cmux, which
// matches that exact value) resets anything else. Empty gives the kubelet's
// header. A server ignores the name: it answers in the caller's subtype.
func (c codec) Name() string { return "" }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if f, ok := v.(*Frame); ok {
		// Ownership of the buffers moves to gRPC, which frees them once
		// written; a frame is therefore sent at most once.
		out := f.data
		f.data = nil
		return out, nil
	}
	out, err := c.proto.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return out, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if f, ok := v.(*Frame); ok {
		// gRPC frees data when Unmarshal returns; the extra reference keeps
		// the buffers alive until the frame is marshaled onward.
		data.Ref()
		f.data = data
		return nil
	}
	if err := c.proto.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode %T: %w", v, err)
	}
	return nil
}
