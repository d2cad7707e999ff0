package streaming

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/moby/spdystream/spdy"
)

// heldMax bounds what is kept of a stream whose type is not known yet.
const heldMax = 64 << 10

// The limits of a parsed header block. remotecommand and port-forward
// streams carry a few short headers (streamtype, port, requestid), while
// the framer's defaults (1,000 headers of up to 1 MiB each, zlib
// compressed) let a 205 KB frame decompress to hundreds of MiB. A block
// over these stops the parse, never the session: at most headerCountMax
// names and values of headerFieldMax bytes each, 128 KiB, are decompressed
// for one frame.
const (
	headerCountMax = 16
	headerFieldMax = 4 << 10
	// controlFrameMax bounds a control frame's compressed payload; a
	// larger one is skipped unread and stops the parse.
	controlFrameMax = 64 << 10
)

// streamSink is told each stream's data, by the stream's type (stdin,
// stdout, stderr, resize, error), in the order each direction carried it.
// It is called with the tap's lock held, one call at a time.
type streamSink interface {
	data(typ string, p []byte)
}

// spdyTap reads a remotecommand session's SPDY frames, both directions, for
// what needs its contents (the audit log's exit code, a recording). The
// client names each stream's type in its SYN_STREAM headers (zlib
// compressed, so every header block of that direction is decoded in
// order). Only sessions that need it pay for it: their bytes go through
// user space instead of splice.
type spdyTap struct {
	mu    sync.Mutex
	types map[spdy.StreamId]string
	// held is data that arrived, in the other direction's parser, before
	// its stream's SYN_STREAM was decoded.
	held    map[spdy.StreamId][]byte
	sinks   []streamSink
	parsers sync.WaitGroup
	// headersOnly keeps nothing per stream and skips data: a
	// port-forward's client opens a stream pair per connection, for the
	// session's life, and only its headers (the port) are wanted.
	headersOnly bool
	// stopped, when set, is told why a direction's parse stopped before
	// its copy ended (a frame over the limits, not SPDY).
	stopped func(toRuntime bool, err error)
}

// newSPDYTap returns nil unless the request upgrades to SPDY and some sink
// wants the data.
func newSPDYTap(r *http.Request, sinks ...streamSink) *spdyTap {
	if len(sinks) == 0 || !isSPDY(r) {
		return nil
	}
	return newTap(sinks...)
}

func newTap(sinks ...streamSink) *spdyTap {
	return &spdyTap{types: map[spdy.StreamId]string{}, held: map[spdy.StreamId][]byte{}, sinks: sinks}
}

// streamOpener is a sink told each stream's headers as the client opens
// it (a port-forward's stream names its port).
type streamOpener interface {
	opened(h http.Header)
}

func isSPDY(r *http.Request) bool {
	return strings.HasPrefix(strings.ToLower(r.Header.Get("Upgrade")), "spdy/")
}

// writer returns where a direction's bytes are copied for parsing, and the
// function ending it. The parser reads until the copy ends; once it cannot
// parse it only drains, so it never holds the stream up.
func (t *spdyTap) writer(toRuntime bool) (io.Writer, func()) {
	pr, pw := io.Pipe()
	t.parsers.Add(1)
	go func() {
		defer t.parsers.Done()
		defer func() { _, _ = io.Copy(io.Discard, pr) }()
		t.parse(pr, toRuntime)
	}()
	return pw, func() { _ = pw.Close() }
}

// parse reads one direction's frames until it ends or stops parsing.
func (t *spdyTap) parse(r io.Reader, toRuntime bool) {
	f, err := spdy.NewFramerWithOptions(io.Discard, r,
		spdy.WithMaxHeaderCount(headerCountMax),
		spdy.WithMaxHeaderFieldSize(headerFieldMax),
		spdy.WithMaxControlFramePayloadSize(controlFrameMax))
	if err != nil {
		return
	}
	for {
		frame, err := f.ReadFrame()
		if err != nil {
			// The copy ended (EOF at a frame's start), or the parse
			// cannot go on: the rest of the direction is drained unread.
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.ErrClosedPipe) && t.stopped != nil {
				t.stopped(toRuntime, err)
			}
			return
		}
		t.frame(frame, toRuntime)
	}
}

func (t *spdyTap) frame(frame spdy.Frame, toRuntime bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch f := frame.(type) {
	case *spdy.SynStreamFrame:
		if !toRuntime {
			return
		}
		for _, s := range t.sinks {
			if o, ok := s.(streamOpener); ok {
				o.opened(f.Headers)
			}
		}
		if t.headersOnly {
			return
		}
		typ := f.Headers.Get("streamtype")
		t.types[f.StreamId] = typ
		if b := t.held[f.StreamId]; len(b) > 0 {
			delete(t.held, f.StreamId)
			t.deliver(typ, b)
		}
	case *spdy.DataFrame:
		if t.headersOnly {
			return
		}
		typ, known := t.types[f.StreamId]
		if !known {
			if b := t.held[f.StreamId]; len(b)+len(f.Data) <= heldMax {
				t.held[f.StreamId] = append(b, f.Data...)
			}
			return
		}
		t.deliver(typ, f.Data)
	}
}

func (t *spdyTap) deliver(typ string, p []byte) {
	for _, s := range t.sinks {
		s.data(typ, p)
	}
}

// wait waits for both parsers, once both copies ended.
func (t *spdyTap) wait() {
	if t != nil {
		t.parsers.Wait()
	}
}
