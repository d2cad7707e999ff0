package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Flow-control sizes the relay advertises on both hops. A stream window of
// 1 MiB lets a list of a few thousand containers cross in one go; the
// connection window bounds what one connection can make crishim hold in
// memory when the other side does not read.
const (
	relayStreamWindow = 1 << 20
	relayConnWindow   = 16 << 20
	relayMaxStreams   = 1000
	// What HTTP/2 assumes until the peer's SETTINGS say otherwise.
	h2DefaultWindow   = 65535
	h2DefaultMaxFrame = 16384
	h2MaxStreamID     = math.MaxInt32
	// ioBufSize is the buffer of the way answers go, read from the
	// runtime and written to the client: about what a unix socket holds
	// (net.core.wmem_default), so that a list of a few hundred containers
	// crosses crishim in one read and one write rather than one per
	// 64 KiB (ListContainers of 300 on containerd: 1.14 of direct with
	// 64 KiB, 1.11 with 256 KiB).
	ioBufSize = 256 << 10
	// requestBufSize is the buffer of the way requests go, read from the
	// client and written to the runtime. CRI requests are small (a
	// CreateContainer of a big pod spec is a few KiB); two full frames
	// fit. ioBufSize both ways cost 1 MiB per client connection that made
	// a call, half of crishim's live heap at 110 pods with the kubelet's
	// two connections (docs/performance.md), and the GC lets the heap
	// grow to twice its live size: the big buffers go only where the big
	// messages go, 576 KiB a connection.
	requestBufSize = 32 << 10
	// idleBufSize is a connection's buffer size each way until it makes
	// its first call.
	idleBufSize = 4 << 10
	// localIOBufSize is the read and write buffer of the relay's
	// connections to crishim's gRPC server: in memory, a write costs no
	// system call to batch, and grpc-go's own buffers on the other end
	// are this size.
	localIOBufSize = 32 << 10
)

// h2conn is one HTTP/2 connection of the relay, client-facing or upstream.
// Its fields are grouped by owner: its reader goroutine's, those under wmu
// (every writer: the HPACK encoder lives there because its table must
// follow the order in which header blocks reach the wire), and those under
// the session's mu.
type h2conn struct {
	// The reader goroutine's.
	br  *bufio.Reader
	r   io.Reader // the socket, under br
	fr  *http2.Framer
	tap *continuationTap // polices a client's header blocks (nil upstream)
	hr  *headerReader
	// grow: the connection made a call; its buffers become full size
	// (requestBufSize read, ioBufSize written) at the next moment they
	// hold nothing (see growBuffers).
	grow bool
	// readSize is the size br takes when attach gives an upstream
	// connection its socket.
	readSize int

	// Under wmu.
	wmu  sync.Mutex
	werr error
	bw   *bufio.Writer
	w    io.Writer // the socket, under bw
	// hdr is the frame header being written: a local array would escape
	// to the heap through bufio's Write, one allocation per frame.
	hdr [9]byte
	// pingAck is the payload of a PING ack being written, for the same
	// reason: the peer's PINGs come every few calls.
	pingAck [8]byte
	// probeAck: a PING of grpc-go's bandwidth estimator awaits its ack,
	// which goes out behind the next frames written anyway (see ackPing).
	probeAck bool
	// answered: HEADERS or DATA went out since the peer's last PING.
	answered bool
	enc      *hpack.Encoder
	hbuf     bytes.Buffer
	// pending holds what is written to an upstream connection while it
	// is being dialed (w is then pending itself); attach sends it.
	pending *bytes.Buffer

	// Under the session's mu.
	send           outWindow // the peer's connection window for our DATA
	recv           inWindow  // the connection window we gave the peer
	peerInitWin    int64
	peerMaxFrame   int
	peerMaxStreams uint32
	blocked        []*flow // flows waiting for this connection's window

	// Set once (by the dial for an upstream connection, under wmu and the
	// session's connMu); close, from any goroutine, only closes it.
	nc net.Conn
}

// newH2conn wraps nc; bufSize is its buffers' size each way to begin
// with.
func newH2conn(nc net.Conn, bufSize int) *h2conn {
	r, w := newRawIO(nc)
	c := &h2conn{
		nc:             nc,
		r:              r,
		w:              w,
		br:             bufio.NewReaderSize(r, bufSize),
		bw:             bufio.NewWriterSize(w, bufSize),
		send:           outWindow{h2DefaultWindow},
		recv:           inWindow{avail: h2DefaultWindow},
		peerInitWin:    h2DefaultWindow,
		peerMaxFrame:   h2DefaultMaxFrame,
		peerMaxStreams: math.MaxUint32,
	}
	c.initFramer()
	return c
}

func (c *h2conn) initFramer() {
	// The framer reads through connReader so that growBuffers and attach
	// can swap br.
	c.fr = http2.NewFramer(nil, connReader{c})
	// RFC 9113 §4.2: a frame larger than the SETTINGS_MAX_FRAME_SIZE we
	// advertised (we advertise none: 16 KiB) MUST be treated as a
	// connection error of type FRAME_SIZE_ERROR. Without the limit the
	// framer would take up to 16 MiB and keep a buffer that size for the
	// connection's lifetime.
	c.fr.SetMaxReadFrameSize(h2DefaultMaxFrame)
	// Header blocks are decoded into fields by hr (see readFrame); the
	// payload of other frames is only valid until the next read, which
	// suits a relay that copies each payload onward at once.
	c.hr = newHeaderReader(c.blockDeadline)
	c.fr.SetReuseFrames()
	c.enc = hpack.NewEncoder(&c.hbuf)
}

// newDialingH2conn is an upstream connection whose dial is under way:
// writes wait in memory until attach. readSize and writeSize are its
// buffers' sizes.
func newDialingH2conn(readSize, writeSize int) *h2conn {
	c := &h2conn{
		pending:        &bytes.Buffer{},
		readSize:       readSize,
		send:           outWindow{h2DefaultWindow},
		recv:           inWindow{avail: h2DefaultWindow},
		peerInitWin:    h2DefaultWindow,
		peerMaxFrame:   h2DefaultMaxFrame,
		peerMaxStreams: math.MaxUint32,
	}
	c.w = c.pending
	c.bw = bufio.NewWriterSize(c.w, writeSize)
	c.initFramer()
	return c
}

// maxPending bounds what may wait for a dial: DATA is bounded by the
// connection window anyway, HEADERS are not.
const maxPending = 1 << 20

// pendingFull says whether a connection being dialed holds all it may.
func (c *h2conn) pendingFull() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.pending != nil && c.pending.Len()+c.bw.Buffered() >= maxPending
}

// setConn gives a dialed connection its socket; false if it was closed
// meanwhile. Callers hold the session's connMu, so that kill sees nc.
func (c *h2conn) setConn(nc net.Conn) bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return false
	}
	c.nc = nc
	return true
}

// attach sends what waited for the dial and makes the socket the
// connection's; the reader starts after it.
func (c *h2conn) attach() {
	r, w := newRawIO(c.nc)
	c.r = r
	c.br = bufio.NewReaderSize(r, c.readSize)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return
	}
	_ = c.bw.Flush() // into pending, which takes everything
	c.w = w
	c.bw.Reset(w)
	if _, err := w.Write(c.pending.Bytes()); err != nil {
		c.failLocked(err)
	}
	c.pending = nil
}

// connReader is what the framer reads: whichever br the connection has.
type connReader struct{ c *h2conn }

func (r connReader) Read(p []byte) (int, error) {
	t := r.c.tap
	if t == nil {
		return r.c.br.Read(p)
	}
	// The error goes out with the next read: io.ReadFull drops one that
	// comes with the last bytes it asked for.
	if t.err != nil {
		return 0, t.err
	}
	n, err := r.c.br.Read(p)
	t.saw(p[:n])
	return n, err
}

// growBuffers gives a client connection that made a call its full-size
// buffers, at a moment when the small ones hold nothing: a connection that
// never calls (or a hostile one) costs a few KiB, not a quarter of a MiB.
// Only the connection's reader calls it.
func (c *h2conn) growBuffers() {
	if !c.grow || c.br.Buffered() > 0 {
		return
	}
	if c.br.Size() < requestBufSize {
		c.br = bufio.NewReaderSize(c.r, requestBufSize)
	}
	c.wmu.Lock()
	if c.bw.Buffered() == 0 {
		c.bw = bufio.NewWriterSize(c.w, ioBufSize)
		c.grow = false
	}
	c.wmu.Unlock()
}

// readFrame reads the next frame, HEADERS as one *http2.MetaHeadersFrame
// with its CONTINUATIONs; the frame is valid until the next read.
func (c *h2conn) readFrame() (http2.Frame, error) {
	c.hr.trim()
	return c.hr.readFrame(c.fr)
}

// blockDeadline puts a deadline on the reads of the rest of a header block
// (on), or lifts it.
func (c *h2conn) blockDeadline(on bool) {
	var t time.Time
	if on {
		t = time.Now().Add(c.hr.blockTimeout)
	}
	if c.nc != nil {
		_ = c.nc.SetReadDeadline(t)
	}
}

// maxHeaderListSize bounds the header lists crishim takes from clients and
// runtimes (as RFC 9113 §6.5.2 counts them: each field's name and value
// and 32 bytes), and is advertised to both as SETTINGS_MAX_HEADER_LIST_SIZE.
// A CRI call's headers or trailers are a few hundred bytes; grpc-go's
// default is 16 MiB, which it is lowering to 8 KiB
// (GRPC_GO_EXPERIMENTAL_ENABLE_8KB_DEFAULT_HEADER_LIST_SIZE), and a peer
// that sent megabytes made crishim hold them per connection. The relay and
// crishim's gRPC server refuse a larger list as grpc-go refuses one over its limit.
const maxHeaderListSize = 16 << 10

// headerBlockTimeout bounds how long a header block may stay unfinished
// (HEADERS without END_HEADERS, its CONTINUATIONs to come): RFC 9113 §6.10
// lets no other frame in meanwhile, so the connection is stuck until then.
// A peer writes a block at once, so seconds are generous.
const headerBlockTimeout = 5 * time.Second

// maxKeptHeaderBuf bounds the encoded block a connection keeps for the
// next one (hbuf): a CRI call's is a few hundred bytes; a bigger one, up
// to maxHeaderListSize and a little, is let go once written.
const maxKeptHeaderBuf = 4 << 10

// frameReady says whether a whole frame is already buffered, so that reading
// it will not block. The reader flushes what it wrote before it blocks: that
// is what batches a burst of frames into one write and still never leaves a
// frame sitting in a buffer.
func (c *h2conn) frameReady() bool {
	n := c.br.Buffered()
	if n < 9 {
		return false
	}
	h, err := c.br.Peek(9)
	if err != nil {
		return false
	}
	length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
	return n >= 9+length
}

// writeFrame appends one frame to the write buffer. A write error closes
// the connection: its reader then fails and tears the connection down, the
// one place where that happens.
func (c *h2conn) writeFrame(typ http2.FrameType, flags http2.Flags, id uint32, payload ...[]byte) {
	c.wmu.Lock()
	c.writeFrameLocked(typ, flags, id, payload...)
	c.wmu.Unlock()
}

func (c *h2conn) writeFrameLocked(typ http2.FrameType, flags http2.Flags, id uint32, payload ...[]byte) {
	mustHold(&c.wmu, "h2conn.wmu")
	if c.werr != nil {
		return
	}
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	if typ == http2.FrameData || typ == http2.FrameHeaders {
		c.answered = true
	}
	h := &c.hdr
	h[0], h[1], h[2] = byte(n>>16), byte(n>>8), byte(n)
	h[3], h[4] = byte(typ), byte(flags)
	binary.BigEndian.PutUint32(h[5:], id&h2MaxStreamID)
	_, err := c.bw.Write(h[:])
	for _, p := range payload {
		if err == nil {
			_, err = c.bw.Write(p)
		}
	}
	if err != nil {
		c.failLocked(err)
	}
}

func (c *h2conn) failLocked(err error) {
	if c.werr == nil {
		c.werr = err
		if c.nc != nil {
			_ = c.nc.Close()
		}
	}
}

// writeHeaders encodes fields with this connection's HPACK encoder and
// writes them as HEADERS plus CONTINUATION frames no larger than the peer
// accepts. Callers hold the session's mu (for peerMaxFrame).
func (c *h2conn) writeHeaders(id uint32, fields []hpack.HeaderField, endStream bool) {
	maxFrame := c.peerMaxFrame
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.hbuf.Reset()
	for _, f := range fields {
		if err := c.enc.WriteField(f); err != nil {
			c.failLocked(fmt.Errorf("hpack: %w", err))
			return
		}
	}
	block := c.hbuf.Bytes()
	flags := http2.Flags(0)
	if endStream {
		flags |= http2.FlagHeadersEndStream
	}
	typ := http2.FrameHeaders
	for {
		n := min(len(block), maxFrame)
		f := flags
		if n == len(block) {
			f |= http2.FlagHeadersEndHeaders
		}
		c.writeFrameLocked(typ, f, id, block[:n])
		block = block[n:]
		if len(block) == 0 {
			break
		}
		typ, flags = http2.FrameContinuation, 0
	}
	if c.hbuf.Cap() > maxKeptHeaderBuf {
		// The write buffer has the bytes.
		c.hbuf = bytes.Buffer{}
	}
}

func (c *h2conn) writeRaw(p []byte) {
	c.wmu.Lock()
	if c.werr == nil {
		if _, err := c.bw.Write(p); err != nil {
			c.failLocked(err)
		}
	}
	c.wmu.Unlock()
}

func (c *h2conn) writeData(id uint32, p []byte, end bool) {
	flags := http2.Flags(0)
	if end {
		flags = http2.FlagDataEndStream
	}
	c.writeFrame(http2.FrameData, flags, id, p)
}

func (c *h2conn) writeWindowUpdate(id uint32, n int64) {
	var p [4]byte
	binary.BigEndian.PutUint32(p[:], uint32(n))
	c.writeFrame(http2.FrameWindowUpdate, 0, id, p[:])
}

func (c *h2conn) writeRST(id uint32, code http2.ErrCode) {
	var p [4]byte
	binary.BigEndian.PutUint32(p[:], uint32(code))
	c.writeFrame(http2.FrameRSTStream, 0, id, p[:])
}

func (c *h2conn) writeGoAway(last uint32, code http2.ErrCode, debug string) {
	p := make([]byte, 8+len(debug))
	binary.BigEndian.PutUint32(p, last)
	binary.BigEndian.PutUint32(p[4:], uint32(code))
	copy(p[8:], debug)
	c.writeFrame(http2.FrameGoAway, 0, 0, p)
}

func (c *h2conn) writePing(ack bool, data [8]byte) {
	flags := http2.Flags(0)
	if ack {
		flags = http2.FlagPingAck
	}
	c.writeFrame(http2.FramePing, flags, 0, data[:])
}

func (c *h2conn) writeSettings(ss ...http2.Setting) {
	p := make([]byte, 0, 6*len(ss))
	for _, s := range ss {
		p = binary.BigEndian.AppendUint16(p, uint16(s.ID))
		p = binary.BigEndian.AppendUint32(p, s.Val)
	}
	c.writeFrame(http2.FrameSettings, 0, 0, p)
}

func (c *h2conn) writeSettingsAck() {
	c.writeFrame(http2.FrameSettings, http2.FlagSettingsAck, 0)
}

// writeOurSettings opens our side of the connection: settings, then the
// connection window raised from the protocol's 64 KiB to ours.
func (c *h2conn) writeOurSettings(maxStreams bool) {
	ss := []http2.Setting{
		{ID: http2.SettingInitialWindowSize, Val: relayStreamWindow},
		{ID: http2.SettingMaxHeaderListSize, Val: maxHeaderListSize},
	}
	if maxStreams {
		ss = append(ss, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: relayMaxStreams})
	} else {
		ss = append(ss, http2.Setting{ID: http2.SettingEnablePush, Val: 0})
	}
	c.writeSettings(ss...)
	c.writeWindowUpdate(0, relayConnWindow-h2DefaultWindow)
	c.recv.avail = relayConnWindow
}

// grpcBDPPing is the payload of the PINGs grpc-go's bandwidth-delay
// estimator sends after DATA arrives (grpc internal/transport/bdp_estimator.go).
var grpcBDPPing = [8]byte{2, 4, 16, 16, 9, 14, 7, 7}

// ackPing answers a PING. grpc-go sends a bandwidth probe after nearly every
// call's DATA, on both hops; answering each with a write of its own costs a
// syscall in crishim and a wake-up in the peer per call. A probe's ack
// rides behind the next frames crishim writes on the connection instead:
// within a transfer that is at once, so the peer's round-trip sample stays
// true, and while the probe is unanswered the peer sends no other. Every
// other PING (keepalive, liveness) is answered at once.
//
// It returns whether crishim sent HEADERS or DATA since the previous PING,
// for flood policing.
func (c *h2conn) ackPing(data [8]byte) (answered bool) {
	c.wmu.Lock()
	answered, c.answered = c.answered, false
	if data == grpcBDPPing {
		c.probeAck = true
	} else {
		c.pingAck = data
		c.writeFrameLocked(http2.FramePing, http2.FlagPingAck, 0, c.pingAck[:])
	}
	c.wmu.Unlock()
	return answered
}

// flush writes out whatever is buffered.
func (c *h2conn) flush() {
	c.wmu.Lock()
	if c.werr == nil && c.bw.Buffered() > 0 {
		if c.probeAck {
			c.probeAck = false
			c.writeFrameLocked(http2.FramePing, http2.FlagPingAck, 0, grpcBDPPing[:])
		}
		if err := c.bw.Flush(); err != nil {
			c.failLocked(err)
		}
	}
	c.wmu.Unlock()
}

// close ends the connection; the reader notices and cleans up. It takes
// no lock: a writer stuck on a peer that does not read holds wmu, and
// closing the socket is what unblocks it (grpc-go's http2Server.Close
// does the same).
func (c *h2conn) close() {
	_ = c.nc.Close()
}

// flushAndClose ends the connection after what is buffered (a GOAWAY).
func (c *h2conn) flushAndClose() {
	c.wmu.Lock()
	if c.werr == nil {
		_ = c.bw.Flush()
	}
	c.failLocked(net.ErrClosed)
	c.wmu.Unlock()
}

// applySettings takes in the peer's SETTINGS. It returns the change of the
// initial stream window, which open streams' send windows must follow.
func (c *h2conn) applySettings(f *http2.SettingsFrame) (winDelta int64, err error) {
	err = f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			winDelta += int64(s.Val) - c.peerInitWin
			c.peerInitWin = int64(s.Val)
		case http2.SettingMaxFrameSize:
			c.peerMaxFrame = int(s.Val)
		case http2.SettingMaxConcurrentStreams:
			c.peerMaxStreams = s.Val
		case http2.SettingHeaderTableSize:
			c.wmu.Lock()
			c.enc.SetMaxDynamicTableSizeLimit(s.Val)
			c.wmu.Unlock()
		}
		return nil
	})
	return winDelta, err
}
