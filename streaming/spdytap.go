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

	// The runtime's side of the session's streams: replied to, and
	// ended (FIN or reset) since; at most streamsNoted of each.
	replied, ended map[spdy.StreamId]bool
	// toClientDone is closed once the parse of the runtime's direction
	// ended; toClientWhole then says it parsed every byte of that
	// direction, whole frames only, so the client's next byte is a
	// frame's first.
	toClientDone  chan struct{}
	toClientWhole bool
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
	return &spdyTap{types: map[spdy.StreamId]string{}, held: map[spdy.StreamId][]byte{}, sinks: sinks,
		replied: map[spdy.StreamId]bool{}, ended: map[spdy.StreamId]bool{}, toClientDone: make(chan struct{})}
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
		if !toRuntime {
			defer close(t.toClientDone)
		}
		defer func() { _, _ = io.Copy(io.Discard, pr) }()
		t.parse(pr, toRuntime)
	}()
	return pw, func() { _ = pw.Close() }
}

// parse reads one direction's frames until it ends or stops parsing.
func (t *spdyTap) parse(r io.Reader, toRuntime bool) {
	// The framer reads what each frame needs, never ahead: read, after
	// a frame, is where the next one starts.
	cr := &readCount{r: r}
	var frameEnd int64
	f, err := spdy.NewFramerWithOptions(io.Discard, cr,
		spdy.WithMaxHeaderCount(headerCountMax),
		spdy.WithMaxHeaderFieldSize(headerFieldMax),
		spdy.WithMaxControlFramePayloadSize(controlFrameMax))
	if err != nil {
		return
	}
	for {
		frame, err := f.ReadFrame()
		if err != nil {
			if !toRuntime {
				t.mu.Lock()
				t.toClientWhole = errors.Is(err, io.EOF) && cr.n == frameEnd
				t.mu.Unlock()
			}
			// The copy ended (EOF at a frame's start), or the parse
			// cannot go on: the rest of the direction is drained unread.
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.ErrClosedPipe) && t.stopped != nil {
				t.stopped(toRuntime, err)
			}
			return
		}
		frameEnd = cr.n
		t.frame(frame, toRuntime)
	}
}

// readCount counts what is read through it.
type readCount struct {
	r io.Reader
	n int64
}

func (c *readCount) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (t *spdyTap) frame(frame spdy.Frame, toRuntime bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch f := frame.(type) {
	case *spdy.SynReplyFrame:
		if !toRuntime {
			t.note(t.replied, f.StreamId)
			if f.CFHeader.Flags&spdy.ControlFlagFin != 0 {
				t.note(t.ended, f.StreamId)
			}
		}
	case *spdy.RstStreamFrame:
		t.note(t.ended, f.StreamId)
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
		if !toRuntime && f.Flags&spdy.DataFlagFin != 0 {
			t.note(t.ended, f.StreamId)
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

// streamsNoted bounds what replied and ended hold: a remotecommand client
// opens five streams at most, each noted once.
const streamsNoted = 16

// note marks a stream in m (replied, ended). Either direction's parse
// may see a stream's frames before the other's saw its SYN_STREAM, so
// streams are noted whatever their type; a session with more streams
// than streamsNoted gets no status at a shutdown.
func (t *spdyTap) note(m map[spdy.StreamId]bool, id spdy.StreamId) {
	if !t.headersOnly && len(m) < streamsNoted {
		m[id] = true
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
