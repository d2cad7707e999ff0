package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode/utf8"
)

// defaultWidth and defaultHeight go in the header when output comes before
// any resize: a terminal's traditional size.
const (
	defaultWidth  = 80
	defaultHeight = 24
)

// CastHeader is the first line of an asciicast v2 file.
type CastHeader struct {
	Version   int               `json:"version"`
	Width     int               `json:"width"`
	Height    int               `json:"height"`
	Timestamp int64             `json:"timestamp"`
	Command   string            `json:"command,omitempty"`
	Title     string            `json:"title,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
}

// Cast writes one session as asciicast v2 (what `asciinema play` and
// `asciinema cat` read): a header line, then one JSON array per event,
// [seconds since the start, type, data]. It is not safe for concurrent
// use.
//
// The header is written at the first event, not at once: its size is the
// terminal's, which the client only sends in its first resize. Once more
// than max bytes were written it writes a last output event and a marker
// saying the recording was cut, and ignores everything after: the session
// goes on, unrecorded. A write error stops it the same way, silently
// (Err says why).
type Cast struct {
	w       io.Writer
	hdr     CastHeader
	start   time.Time
	now     func() time.Time
	max     int64
	input   bool
	written int64
	started bool
	stopped bool
	err     error
	// Bytes held back from the last event of each type: a UTF-8 sequence
	// split between two frames is written whole, in the next event.
	carry map[string][]byte
}

// NewCast starts a recording at now(); hdr's size and timestamp are filled
// in by the recording. max <= 0 is no limit; input records what the user
// typed (off by default: passwords are typed into terminals).
func NewCast(w io.Writer, hdr CastHeader, max int64, input bool, now func() time.Time) *Cast {
	hdr.Version = 2
	start := now()
	hdr.Timestamp = start.Unix()
	return &Cast{w: w, hdr: hdr, start: start, now: now, max: max, input: input, carry: map[string][]byte{}}
}

// Output records what the terminal showed (stdout and stderr).
func (c *Cast) Output(p []byte) { c.event("o", p) }

// Input records what was typed, when input is recorded.
func (c *Cast) Input(p []byte) {
	if c.input {
		c.event("i", p)
	}
}

// Resize records a terminal size; the first one before any output is the
// header's.
func (c *Cast) Resize(width, height int) {
	if !c.started {
		c.hdr.Width, c.hdr.Height = width, height
		c.writeHeader()
		return
	}
	c.line(c.since(), "r", strconv.Itoa(width)+"x"+strconv.Itoa(height))
}

// Cut reports whether the recording stopped at its limit.
func (c *Cast) Cut() bool { return c.stopped && c.err == nil }

// Err is the write error that stopped the recording, if any.
func (c *Cast) Err() error { return c.err }

// Close writes what is left of split UTF-8 sequences, and the header of a
// session that showed nothing. A recording whose file was deleted while
// it was written (every write succeeded, into a file with no name) is
// ErrRecordingDeleted, to be counted as lost.
func (c *Cast) Close() error {
	for _, typ := range []string{"o", "i"} {
		if b := c.carry[typ]; len(b) > 0 {
			c.carry[typ] = nil
			c.line(c.since(), typ, string(b))
		}
	}
	if !c.started {
		c.writeHeader()
	}
	if c.err == nil && deletedFile(c.w) {
		c.fail(ErrRecordingDeleted)
	}
	return c.err
}

func (c *Cast) event(typ string, p []byte) {
	if c.stopped || len(p) == 0 {
		return
	}
	if !c.started {
		c.writeHeader()
	}
	b := append(c.carry[typ], p...)
	n := completeUTF8(b)
	c.carry[typ] = append([]byte(nil), b[n:]...)
	if n > 0 {
		c.line(c.since(), typ, string(b[:n]))
	}
}

func (c *Cast) since() float64 { return c.now().Sub(c.start).Seconds() }

func (c *Cast) writeHeader() {
	c.started = true
	if c.hdr.Width == 0 || c.hdr.Height == 0 {
		c.hdr.Width, c.hdr.Height = defaultWidth, defaultHeight
	}
	b, err := marshal(c.hdr)
	if err != nil {
		c.fail(fmt.Errorf("encode asciicast header: %w", err))
		return
	}
	c.write(b)
}

// line writes one event, or the cut notice instead when it would take the
// file past max.
func (c *Cast) line(t float64, typ, data string) {
	if c.stopped {
		return
	}
	b := eventLine(t, typ, data)
	if c.max > 0 && c.written+int64(len(b)) > c.max {
		c.stopped = true
		c.write(eventLine(t, "o", fmt.Sprintf("\r\n[crishim: recording cut at %d bytes (--record-max-bytes); the session went on]\r\n", c.max)))
		c.write(eventLine(t, "m", "crishim: recording cut"))
		return
	}
	c.write(b)
}

func eventLine(t float64, typ, data string) []byte {
	d, _ := marshal(data) // a string always encodes
	d = d[:len(d)-1]
	b := make([]byte, 0, len(d)+32)
	b = append(b, '[')
	b = strconv.AppendFloat(b, t, 'f', 6, 64)
	b = append(b, `, "`...)
	b = append(b, typ...)
	b = append(b, `", `...)
	b = append(b, d...)
	return append(b, "]\n"...)
}

// marshal is JSON with its newline, and without escaping <, > and &, which
// terminals print often and JSON needs no escape for.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return buf.Bytes(), err
}

func (c *Cast) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.written += int64(n)
	if err != nil {
		c.fail(fmt.Errorf("write recording: %w", err))
	}
}

func (c *Cast) fail(err error) {
	c.err = err
	c.stopped = true
}

// completeUTF8 is the length of p without an incomplete UTF-8 sequence at
// its end (at most 3 bytes). Invalid bytes are not held: they could never
// complete.
func completeUTF8(p []byte) int {
	for i := 1; i <= 3 && i <= len(p); i++ {
		r := p[len(p)-i]
		if r < utf8.RuneSelf {
			return len(p)
		}
		if utf8.RuneStart(r) {
			if !utf8.FullRune(p[len(p)-i:]) {
				return len(p) - i
			}
			return len(p)
		}
	}
	return len(p)
}
