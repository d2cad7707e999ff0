package streaming

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// wsReadLimit bounds a WebSocket frame from the client. The WebSocket
// server reads each frame whole (its own limit is 32 MiB, then base64's
// decoded copy); client-go writes stdin in 32 KiB reads, so this only
// refuses what no client sends.
const wsReadLimit = 1 << 20

// wsHijacker hands the WebSocket server a wsConn over the client's
// connection, kept in the session so that a cut reaches it.
type wsHijacker struct {
	http.ResponseWriter
	sess *session
	conn *wsConn // set by Hijack, before the WebSocket server is ready
}

func (h *wsHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.sess.track(c, false)
	h.conn = newWSConn(c, rw.Reader)
	// Every read goes through the wsConn (net/http's reader would bypass
	// it), starting with what net/http read ahead.
	return h.conn, bufio.NewReadWriter(bufio.NewReader(h.conn), bufio.NewWriter(h.conn)), nil
}

// wsConn is a translated session's client connection: it bounds the
// client's frames, tells when the client is gone, and closes as the API
// server does once crishim ended the session: half-close, then wait
// (bounded) for the client's close.
type wsConn struct {
	net.Conn
	ahead  *bufio.Reader // what net/http read past the request
	frames frameLimit

	// goneCtx is done when the client's side ended: a read failed (its
	// connection closed, the idle timeout, a frame over the limit), or
	// the WebSocket server closed after reading the client's close.
	goneCtx context.Context
	gone    context.CancelFunc

	mu        sync.Mutex
	isEnding  bool // crishim ended the session: the next close lingers
	lingering bool
	closed    bool
}

func newWSConn(c net.Conn, ahead *bufio.Reader) *wsConn {
	ctx, cancel := context.WithCancel(context.Background())
	return &wsConn{Conn: c, ahead: ahead, goneCtx: ctx, gone: cancel}
}

func (c *wsConn) Read(p []byte) (int, error) {
	var n int
	var err error
	if b := c.ahead.Buffered(); b > 0 {
		n, err = c.ahead.Read(p[:min(len(p), b)])
	} else {
		n, err = c.Conn.Read(p)
	}
	if ferr := c.frames.check(p[:n]); ferr != nil {
		c.gone()
		return 0, ferr
	}
	if err != nil {
		c.gone()
	}
	return n, err
}

// ending says crishim ends the session: its status is written, the close
// that follows lingers.
func (c *wsConn) ending() {
	c.mu.Lock()
	c.isEnding = true
	c.mu.Unlock()
}

// Close is called by the WebSocket server: once when crishim ends the
// session (after the close frame), and once when its reader stops (after
// the client's close frame or a failed read). The first close after ending
// half-closes and waits for the second, or wsCloseWait.
func (c *wsConn) Close() error {
	c.mu.Lock()
	if c.closed || c.lingering {
		c.mu.Unlock()
		c.gone() // the reader stopped: the client closed
		return nil
	}
	if !c.isEnding {
		c.closed = true
		c.mu.Unlock()
		c.gone()
		return c.Conn.Close()
	}
	c.lingering = true
	c.mu.Unlock()
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	t := time.NewTimer(wsCloseWait)
	select {
	case <-c.goneCtx.Done():
	case <-t.C:
	}
	t.Stop()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.gone()
	return c.Conn.Close()
}

// frameLimit follows the frame headers in the bytes a client sends, to
// refuse a frame over wsReadLimit before the WebSocket server reads it.
// It only reads lengths: the frames themselves are the server's.
type frameLimit struct {
	hdr  [14]byte // at most: 2, an 8-byte length, a 4-byte mask key
	n    int      // header bytes held
	left uint64   // payload bytes of the current frame still to pass
}

func (f *frameLimit) check(p []byte) error {
	for len(p) > 0 {
		if f.left > 0 {
			k := min(uint64(len(p)), f.left)
			f.left -= k
			p = p[k:]
			continue
		}
		f.hdr[f.n] = p[0]
		f.n++
		p = p[1:]
		if f.n < 2 {
			continue
		}
		need := 2
		switch f.hdr[1] & 0x7f {
		case 126:
			need += 2
		case 127:
			need += 8
		}
		if f.hdr[1]&0x80 != 0 {
			need += 4
		}
		if f.n < need {
			continue
		}
		var length uint64
		switch l := f.hdr[1] & 0x7f; l {
		case 126:
			length = uint64(binary.BigEndian.Uint16(f.hdr[2:4]))
		case 127:
			length = binary.BigEndian.Uint64(f.hdr[2:10])
		default:
			length = uint64(l)
		}
		f.n = 0
		if length > wsReadLimit {
			return fmt.Errorf("WebSocket frame of %d bytes, over crishim's limit of %d", length, wsReadLimit)
		}
		f.left = length
	}
	return nil
}
