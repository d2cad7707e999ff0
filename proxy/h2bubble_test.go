package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"

	"github.com/crishim/crishim/caller"
)

// The relay's timer tests run in a testing/synctest bubble, as x/net's
// http2 tests do: the client and the runtime are in-memory connections
// (net.Pipe), so every goroutine of the relay blocks durably, and the
// bubble's clock moves only when all of them wait. The relay's own timeouts
// (5 s, 10 s, as shipped) then pass at once, and a test waiting for a frame
// the relay never sends fails at once: nothing else can happen, and the
// bubble's clock jumps to the test's bound.

// bubbleBound ends a wait in the bubble: an hour of the bubble's clock,
// which passes at once when nothing else can happen. It measures nothing.
const bubbleBound = time.Hour

// bubbleRelay is a relay in a bubble, with no listener: the test hands it
// each client connection.
type bubbleRelay struct {
	r *relay
	// runtime serves each connection the relay dials to the runtime.
	runtime func(nc net.Conn)
	// stop is closed when the test ends: fake runtimes give up waiting.
	stop chan struct{}
}

// newBubbleRelay builds a relay in the calling bubble whose runtime
// connections are served by runtime.
func newBubbleRelay(t *testing.T, runtime func(nc net.Conn)) *bubbleRelay {
	t.Helper()
	b := &Backend{runtimePath: "/bubble/runtime.sock", imagePath: "/bubble/runtime.sock", backoff: reconnectBackoff}
	// Never served: the tests here make no intercepted call.
	gs := grpc.NewServer()
	br := &bubbleRelay{runtime: runtime, stop: make(chan struct{})}
	br.r = newRelay(b, gs, ServerOptions{identify: func(net.Conn) *caller.Process { return nil }}, nil, nil, DefaultMaxMessageSize, newLocalCallers())
	br.r.endpoints[routeRuntime].dial = func(context.Context) (net.Conn, error) {
		relayEnd, runtimeEnd := net.Pipe()
		go br.runtime(runtimeEnd)
		return relayEnd, nil
	}
	// A test that fails leaves no goroutine of the bubble blocked, which
	// synctest would report instead of the failure.
	t.Cleanup(func() {
		close(br.stop)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		br.r.shutdown(ctx)
	})
	return br
}

// accept starts a session for a new client connection, as relay.serve
// does, and returns the client's end.
func (br *bubbleRelay) accept() net.Conn {
	clientEnd, relayEnd := net.Pipe()
	s := newSession(br.r, relayEnd)
	r := br.r
	r.mu.Lock()
	r.sessions[s] = struct{}{}
	r.sessWG.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.sessWG.Done()
		s.run()
		r.mu.Lock()
		delete(r.sessions, s)
		r.mu.Unlock()
	}()
	return clientEnd
}

// seenFrame is a frame one end of a bubble connection read, copied.
type seenFrame struct {
	typ    http2.FrameType
	id     uint32
	flags  http2.Flags
	fields []hpack.HeaderField // HEADERS (with its CONTINUATIONs)
	data   []byte              // DATA and PING payload, GOAWAY debug data
	last   uint32              // GOAWAY
	code   http2.ErrCode       // GOAWAY, RST_STREAM
	at     time.Time           // the bubble's clock when it was read
	err    error               // the connection's end: no frame
}

func (f seenFrame) endsStream() bool {
	return f.flags.Has(http2.FlagDataEndStream) && (f.typ == http2.FrameHeaders || f.typ == http2.FrameData)
}

// peer is one end of a bubble connection: its frames are read by a
// goroutine of its own (a net.Pipe write waits for the reader, and the
// relay writes while the test does), and written by the test.
type peer struct {
	nc     net.Conn
	fr     *http2.Framer
	enc    *hpack.Encoder
	buf    bytes.Buffer
	frames chan seenFrame
}

func newPeer(nc net.Conn) *peer {
	p := &peer{nc: nc, fr: http2.NewFramer(nc, nc), frames: make(chan seenFrame, 64)}
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	p.enc = hpack.NewEncoder(&p.buf)
	go p.read()
	return p
}

func (p *peer) read() {
	defer close(p.frames)
	for {
		f, err := p.fr.ReadFrame()
		if err != nil {
			p.frames <- seenFrame{err: err, at: time.Now()}
			return
		}
		sf := seenFrame{typ: f.Header().Type, id: f.Header().StreamID, flags: f.Header().Flags, at: time.Now()}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			sf.typ = http2.FrameHeaders
			sf.fields = slices.Clone(f.Fields)
		case *http2.DataFrame:
			sf.data = slices.Clone(f.Data())
		case *http2.PingFrame:
			sf.data = slices.Clone(f.Data[:])
		case *http2.GoAwayFrame:
			sf.last, sf.code, sf.data = f.LastStreamID, f.ErrCode, slices.Clone(f.DebugData())
		case *http2.RSTStreamFrame:
			sf.code = f.ErrCode
		}
		p.frames <- sf
	}
}

// next returns the next frame that satisfies want, failing the test if
// the connection ends first or none comes within bubbleBound.
func (p *peer) next(t *testing.T, what string, want func(seenFrame) bool) seenFrame {
	t.Helper()
	bound := time.After(bubbleBound)
	for {
		select {
		case f, ok := <-p.frames:
			if !ok || f.err != nil {
				t.Fatalf("%s: the connection ended first (%v)", what, f.err)
			}
			if want(f) {
				return f
			}
		case <-bound:
			t.Fatalf("%s: nothing within %v of the bubble's clock", what, bubbleBound)
		}
	}
}

// closed waits for the connection to end, failing the test if a frame
// that is not wanted comes first.
func (p *peer) closed(t *testing.T, what string, skip func(seenFrame) bool) time.Time {
	t.Helper()
	bound := time.After(bubbleBound)
	for {
		select {
		case f, ok := <-p.frames:
			if !ok || f.err != nil {
				return f.at
			}
			if !skip(f) {
				t.Fatalf("%s: frame %v on stream %d", what, f.typ, f.id)
			}
		case <-bound:
			t.Fatalf("%s: still open after %v of the bubble's clock", what, bubbleBound)
		}
	}
}

func (p *peer) fields(kv ...string) []byte {
	p.buf.Reset()
	for i := 0; i < len(kv); i += 2 {
		_ = p.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return slices.Clone(p.buf.Bytes())
}

// dialClient opens a client connection: the preface and empty SETTINGS.
func (br *bubbleRelay) dialClient(t *testing.T) *peer {
	t.Helper()
	c := newPeer(br.accept())
	if _, err := io.WriteString(c.nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c
}

// callVersion sends a whole Version call on stream id.
func (p *peer) callVersion(t *testing.T, id uint32) {
	t.Helper()
	block := p.fields(":method", "POST", ":scheme", "http", ":path", versionMethod,
		":authority", "localhost", "content-type", "application/grpc", "te", "trailers")
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := p.fr.WriteData(id, true, []byte{0, 0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
}

// heldRuntime serves the relay's runtime connections: it takes each call,
// tells started, and answers OK once release is closed.
func (br *bubbleRelay) heldRuntime(started chan<- uint32, release <-chan struct{}) func(net.Conn) {
	return func(nc net.Conn) {
		defer nc.Close()
		var preface [len(http2.ClientPreface)]byte
		if _, err := io.ReadFull(nc, preface[:]); err != nil {
			return
		}
		rt := newPeer(nc)
		if err := rt.fr.WriteSettings(); err != nil {
			return
		}
		for f := range rt.frames {
			if f.err != nil || !f.endsStream() {
				continue
			}
			started <- f.id
			select {
			case <-release:
			case <-br.stop:
				return
			}
			_ = rt.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.id, EndHeaders: true,
				BlockFragment: rt.fields(":status", "200", "content-type", "application/grpc")})
			_ = rt.fr.WriteData(f.id, false, []byte{0, 0, 0, 0, 0})
			_ = rt.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.id, EndHeaders: true, EndStream: true,
				BlockFragment: rt.fields("grpc-status", "0")})
		}
	}
}

// shutdownInBubble runs the relay's graceful shutdown on a goroutine of
// the bubble, with a deadline far beyond what the tests wait for; the
// channel is closed when it returns.
func (br *bubbleRelay) shutdownInBubble() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), bubbleBound)
		defer cancel()
		br.r.shutdown(ctx)
	}()
	return done
}

// TestGracefulGoAwayInABubble: a graceful shutdown sends GOAWAY(max) and
// a PING; the second GOAWAY, with the last stream crishim took, follows the
// PING's ack at once, or goAwayTimeout (5 s) later from a client that
// never acks; the call in flight finishes, then the connection closes and
// the shutdown returns, long before its deadline.
func TestGracefulGoAwayInABubble(t *testing.T) {
	for _, ack := range []bool{true, false} {
		name := map[bool]string{true: "ack", false: "no ack"}[ack]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				started, release := make(chan uint32, 1), make(chan struct{})
				br := newBubbleRelay(t, nil)
				br.runtime = br.heldRuntime(started, release)
				c := br.dialClient(t)
				c.callVersion(t, 1)
				<-started
				start := time.Now()
				shut := br.shutdownInBubble()

				first := c.next(t, "the first GOAWAY", func(f seenFrame) bool { return f.typ == http2.FrameGoAway })
				if first.last != h2MaxStreamID || first.code != http2.ErrCodeNo {
					t.Fatalf("first GOAWAY: last stream %d, %v; want %d, NO_ERROR", first.last, first.code, uint32(h2MaxStreamID))
				}
				ping := c.next(t, "the shutdown PING", func(f seenFrame) bool {
					return f.typ == http2.FramePing && !f.flags.Has(http2.FlagPingAck)
				})
				if ack {
					if err := c.fr.WritePing(true, [8]byte(ping.data)); err != nil {
						t.Fatal(err)
					}
				}
				second := c.next(t, "the second GOAWAY", func(f seenFrame) bool { return f.typ == http2.FrameGoAway })
				if second.last != 1 || second.code != http2.ErrCodeNo {
					t.Errorf("second GOAWAY: last stream %d, %v; want 1, NO_ERROR", second.last, second.code)
				}
				want := goAwayTimeout
				if ack {
					want = 0
				}
				if waited := second.at.Sub(start); waited != want {
					t.Errorf("the second GOAWAY came %v after the first, want %v", waited, want)
				}

				close(release)
				c.next(t, "the end of the call in flight", seenFrame.endsStream)
				c.closed(t, "the connection after its last call", func(seenFrame) bool { return false })
				select {
				case <-shut:
				case <-time.After(bubbleBound):
					t.Fatal("the shutdown went on after the last call ended")
				}
			})
		})
	}
}

// TestUnfinishedHeaderBlockTimesOutInABubble: HEADERS without END_HEADERS,
// and no CONTINUATION after it, holds a client's connection (RFC 9113
// §6.10 lets nothing else in) for headerBlockTimeout (5 s) exactly; then
// GOAWAY(PROTOCOL_ERROR), and the relay hangs up.
func TestUnfinishedHeaderBlockTimesOutInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		br := newBubbleRelay(t, func(nc net.Conn) { _ = nc.Close() })
		c := br.dialClient(t)
		c.next(t, "the relay's SETTINGS ack", func(f seenFrame) bool {
			return f.typ == http2.FrameSettings && f.flags.Has(http2.FlagSettingsAck)
		})
		block := c.fields(":method", "POST", ":path", versionMethod)
		start := time.Now()
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true}); err != nil {
			t.Fatal(err)
		}
		ga := c.next(t, "GOAWAY for the unfinished block", func(f seenFrame) bool { return f.typ == http2.FrameGoAway })
		if ga.code != http2.ErrCodeProtocol || !bytes.Contains(ga.data, []byte("unfinished")) {
			t.Errorf("GOAWAY %v %q, want PROTOCOL_ERROR about an unfinished block", ga.code, ga.data)
		}
		if waited := ga.at.Sub(start); waited != headerBlockTimeout {
			t.Errorf("GOAWAY %v after the HEADERS, want %v", waited, headerBlockTimeout)
		}
		c.closed(t, "the connection after GOAWAY", func(seenFrame) bool { return false })
	})
}

// TestSilentClientIsDroppedInABubble: a client that connects and sends
// nothing (no preface) holds a session for handshakeTimeout (10 s), then
// the relay hangs up; one that sends its preface is kept, idle, as long as
// it likes (a CRI client's connection lives as long as the kubelet).
func TestSilentClientIsDroppedInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		br := newBubbleRelay(t, func(nc net.Conn) { _ = nc.Close() })
		silent := newPeer(br.accept())
		start := time.Now()
		end := silent.closed(t, "a client that sends no preface", func(f seenFrame) bool {
			return f.typ == http2.FrameSettings || f.typ == http2.FrameWindowUpdate // the relay's opening
		})
		if waited := end.Sub(start); waited != handshakeTimeout {
			t.Errorf("the silent client was dropped after %v, want %v", waited, handshakeTimeout)
		}

		idle := br.dialClient(t)
		idle.next(t, "the relay's SETTINGS ack", func(f seenFrame) bool {
			return f.typ == http2.FrameSettings && f.flags.Has(http2.FlagSettingsAck)
		})
		time.Sleep(24 * time.Hour)
		synctest.Wait()
		select {
		case f := <-idle.frames:
			t.Fatalf("an idle client after a day: %v (%v)", f.typ, f.err)
		default:
		}
		// It still calls: a PING is answered at once.
		if err := idle.fr.WritePing(false, [8]byte{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		pingAt := time.Now()
		ack := idle.next(t, "the PING ack", func(f seenFrame) bool { return f.typ == http2.FramePing })
		if !ack.flags.Has(http2.FlagPingAck) || ack.at != pingAt {
			t.Errorf("PING answered with flags %v after %v, want an ack at once", ack.flags, ack.at.Sub(pingAt))
		}
		_ = idle.nc.Close()
		<-br.shutdownInBubble()
	})
}

// TestUnfinishedHeaderBlockFromTheRuntimeInABubble: the same bound holds
// for the runtime: an answer whose header block it never finishes gets it
// GOAWAY(PROTOCOL_ERROR) after headerBlockTimeout (5 s), and the client's
// call ends Unavailable instead of hanging.
func TestUnfinishedHeaderBlockFromTheRuntimeInABubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		br := newBubbleRelay(t, nil)
		goAways := make(chan seenFrame, 1)
		var answered time.Time
		br.runtime = func(nc net.Conn) {
			defer nc.Close()
			var preface [len(http2.ClientPreface)]byte
			if _, err := io.ReadFull(nc, preface[:]); err != nil {
				return
			}
			rt := newPeer(nc)
			_ = rt.fr.WriteSettings()
			for f := range rt.frames {
				switch {
				case f.err != nil:
					return
				case f.endsStream():
					answered = time.Now()
					_ = rt.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.id, BlockFragment: rt.fields(":status", "200")})
				case f.typ == http2.FrameGoAway:
					goAways <- f
					return
				}
			}
		}
		c := br.dialClient(t)
		c.callVersion(t, 1)
		end := c.next(t, "the end of the call", func(f seenFrame) bool {
			return f.typ == http2.FrameRSTStream || f.endsStream()
		})
		if !slices.Contains(end.fields, hpack.HeaderField{Name: "grpc-status", Value: "14"}) {
			t.Errorf("the call ended with %v %v, want grpc-status 14 (Unavailable)", end.typ, end.fields)
		}
		var ga seenFrame
		select {
		case ga = <-goAways:
		case <-time.After(bubbleBound):
			t.Fatal("the runtime got no GOAWAY")
		}
		if ga.code != http2.ErrCodeProtocol {
			t.Errorf("the runtime got GOAWAY %v, want PROTOCOL_ERROR", ga.code)
		}
		if waited := ga.at.Sub(answered); waited != headerBlockTimeout {
			t.Errorf("GOAWAY %v after the unfinished block, want %v", waited, headerBlockTimeout)
		}
	})
}
