package proxy

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// headerReader decodes a connection's header blocks, as the framer's
// ReadMetaHeaders would, into one MetaHeadersFrame and one field slice it
// reuses: the framer's own path allocates the frame, a closure and its
// captured variables and a growing field slice for every block, about 20
// allocations per relayed call. Only the connection's reader uses it, and
// the frame it returns is valid until the next read (flow.endWith copies
// the trailers it keeps).
//
// It applies the framer's checks: field names and values (a stream error),
// pseudo-headers first, known, not repeated and not mixing request and
// response (a stream error), the header list size (the block is truncated,
// and a block far over the limit, or a CONTINUATION after an invalid field,
// is a connection error), and HPACK errors (COMPRESSION_ERROR). A block
// whose CONTINUATIONs do not come within blockTimeout is a connection
// error too.
//
// What it keeps between blocks is bounded whatever the peer sends: the
// decoder's table (4 KiB) and its buffer for a string cut across frames
// (at most twice maxHeaderListSize), and a field slice of at most
// maxKeptFields.
type headerReader struct {
	dec  *hpack.Decoder
	mh   http2.MetaHeadersFrame
	emit func(hpack.HeaderField)
	// fields holds what a block decodes to, reused from block to block.
	fields []hpack.HeaderField
	// deadline puts blockTimeout on the reads of a block's CONTINUATIONs
	// (true) or lifts it (false).
	deadline     func(on bool)
	blockTimeout time.Duration

	// The block being decoded.
	headersLeft, trailersLeft uint32
	sawRegular                bool
	invalid                   error
}

// maxKeptFields is the most fields a connection keeps room for between
// blocks: a gRPC call's blocks have about ten, and the room a bigger one
// took is let go at the next block.
const maxKeptFields = 64

func newHeaderReader(deadline func(on bool)) *headerReader {
	h := &headerReader{dec: hpack.NewDecoder(4096, nil), deadline: deadline, blockTimeout: headerBlockTimeout}
	h.emit = h.field
	h.dec.SetEmitFunc(h.emit)
	h.dec.SetMaxStringLength(maxHeaderListSize)
	return h
}

// readFrame reads the next frame from fr, a whole header block (CONTINUATIONs
// and all) for HEADERS.
func (h *headerReader) readFrame(fr *http2.Framer) (http2.Frame, error) {
	f, err := fr.ReadFrame()
	if err != nil {
		return f, err
	}
	hf, ok := f.(*http2.HeadersFrame)
	if !ok {
		return f, nil
	}
	return h.read(fr, hf, hf.HeaderBlockFragment())
}

// errPseudoAfterRegular and the rest say what was wrong with a header
// block, in the framer's words.
var errPseudoAfterRegular = errors.New("pseudo header field after regular")

// read decodes the block that starts with frag, hf's fragment, reading
// its CONTINUATIONs from fr.
func (h *headerReader) read(fr *http2.Framer, hf *http2.HeadersFrame, frag []byte) (http2.Frame, error) {
	mh := &h.mh
	*mh = http2.MetaHeadersFrame{HeadersFrame: hf, Fields: h.fields[:0]}
	h.headersLeft, h.trailersLeft = maxHeaderListSize, maxHeaderListSize
	h.sawRegular, h.invalid = false, nil
	h.dec.SetEmitEnabled(true)
	ended := hf.HeadersEnded()
	whole := ended
	if !whole {
		// RFC 9113 §6.10: no other frame may come until the block ends,
		// so a peer that never ends it would hold the connection: the
		// whole block gets blockTimeout.
		h.deadline(true)
	}
	for {
		// A block far over the size limit is not decoded at all, nor is
		// anything after an invalid field (whose size is not counted).
		if int64(len(frag)) > 2*int64(h.headersLeft+h.trailersLeft) || h.invalid != nil {
			return nil, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if _, err := h.dec.Write(frag); err != nil {
			return nil, http2.ConnectionError(http2.ErrCodeCompression)
		}
		if ended {
			break
		}
		cf, err := h.continuation(fr)
		if err != nil {
			return nil, err
		}
		frag, ended = cf.HeaderBlockFragment(), cf.HeadersEnded()
	}
	if !whole {
		h.deadline(false)
	}
	if err := h.dec.Close(); err != nil {
		return nil, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if h.invalid == nil {
		h.invalid = checkPseudos(mh.PseudoFields())
	}
	if h.invalid != nil {
		return nil, http2.StreamError{StreamID: hf.StreamID, Code: http2.ErrCodeProtocol, Cause: h.invalid}
	}
	return mh, nil
}

// trim lets go of the room a big block's fields took, once the frame that
// used them is done with (the next read): a connection that sent one big
// block and then idles must not keep it.
func (h *headerReader) trim() {
	if cap(h.fields) > maxKeptFields {
		h.fields, h.mh.Fields = nil, nil
	}
}

// continuation reads the next CONTINUATION of a block.
func (h *headerReader) continuation(fr *http2.Framer) (*http2.ContinuationFrame, error) {
	f, err := fr.ReadFrame()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		detail := fmt.Sprintf("a header block unfinished after %v", h.blockTimeout)
		return nil, protoError{code: http2.ErrCodeProtocol, reason: reasonHeaders, detail: detail, debug: "crishim: " + detail}
	}
	if err != nil {
		return nil, err
	}
	return f.(*http2.ContinuationFrame), nil // the framer checks the order
}

// field takes in one decoded field.
func (h *headerReader) field(hf hpack.HeaderField) {
	if !httpguts.ValidHeaderFieldValue(hf.Value) {
		// The value stays out of the error: it may be a secret.
		h.invalid = fmt.Errorf("invalid header field value for %q", hf.Name)
	}
	if strings.HasPrefix(hf.Name, ":") {
		if h.sawRegular {
			h.invalid = errPseudoAfterRegular
		}
	} else {
		h.sawRegular = true
		if !validFieldName(hf.Name) {
			h.invalid = fmt.Errorf("invalid header field name %q", hf.Name)
		}
	}
	if h.invalid != nil {
		h.dec.SetEmitEnabled(false)
		return
	}
	left, size := &h.headersLeft, hf.Size()
	if hf.Name == "trailer" {
		// As the framer counts it: each name the field announces costs a
		// field's overhead.
		n := uint32(strings.Count(hf.Value, ",") + 1)
		left, size = &h.trailersLeft, uint32(len(hf.Value))-n+1+n*hpack.HeaderField{}.Size()
	}
	if size > *left {
		h.dec.SetEmitEnabled(false)
		h.mh.Truncated = true
		h.headersLeft, h.trailersLeft = 0, 0
		return
	}
	*left -= size
	h.mh.Fields = append(h.mh.Fields, hf)
	h.fields = h.mh.Fields
}

// validFieldName is the framer's check of a field name on the wire: a
// token in lower case (RFC 9113 §8.2.1).
func validFieldName(v string) bool {
	if v == "" {
		return false
	}
	for _, r := range v {
		if !httpguts.IsTokenRune(r) || 'A' <= r && r <= 'Z' {
			return false
		}
	}
	return true
}

// checkPseudos rejects unknown or repeated pseudo-headers and a block that
// has both a request's and a response's (RFC 9113 §8.3).
func checkPseudos(pf []hpack.HeaderField) error {
	var isRequest, isResponse bool
	for i, hf := range pf {
		switch hf.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			isRequest = true
		case ":status":
			isResponse = true
		default:
			return fmt.Errorf("invalid pseudo-header %q", hf.Name)
		}
		for _, prev := range pf[:i] {
			if hf.Name == prev.Name {
				return fmt.Errorf("duplicate pseudo-header %q", hf.Name)
			}
		}
	}
	if isRequest && isResponse {
		return errors.New("mix of request and response pseudo headers")
	}
	return nil
}
