package streaming

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/spdystream/spdy"
)

// errorStreamMax bounds what is kept of a stream that may be the error
// stream: a v4 status is a few hundred bytes.
const errorStreamMax = 4 << 10

// exitTap finds an exec's exit code in its SPDY streams, for the audit
// log: the client names each stream's type in its SYN_STREAM headers (zlib
// compressed, so every header block of that direction is decoded in
// order), and the runtime writes a metav1.Status on the "error" stream
// (remotecommand v4). Only exec sessions that are audited pay for it: their
// bytes go through user space instead of splice.
type exitTap struct {
	mu      sync.Mutex
	types   map[spdy.StreamId]string
	data    map[spdy.StreamId][]byte
	parsers sync.WaitGroup
}

// newExitTap returns nil unless the request upgrades to SPDY.
func newExitTap(r *http.Request) *exitTap {
	if !strings.HasPrefix(strings.ToLower(r.Header.Get("Upgrade")), "spdy/") {
		return nil
	}
	return &exitTap{types: map[spdy.StreamId]string{}, data: map[spdy.StreamId][]byte{}}
}

// writer returns where a direction's bytes are copied for parsing, and the
// function ending it. The parser reads until the copy ends; once it cannot
// parse it only drains, so it never holds the stream up.
func (t *exitTap) writer(toRuntime bool) (io.Writer, func()) {
	pr, pw := io.Pipe()
	t.parsers.Add(1)
	go func() {
		defer t.parsers.Done()
		defer func() { _, _ = io.Copy(io.Discard, pr) }()
		f, err := spdy.NewFramer(io.Discard, pr)
		if err != nil {
			return
		}
		for {
			frame, err := f.ReadFrame()
			if err != nil {
				return
			}
			t.frame(frame, toRuntime)
		}
	}()
	return pw, func() { _ = pw.Close() }
}

func (t *exitTap) frame(frame spdy.Frame, toRuntime bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch f := frame.(type) {
	case *spdy.SynStreamFrame:
		if toRuntime {
			t.types[f.StreamId] = f.Headers.Get("streamtype")
		}
	case *spdy.DataFrame:
		if toRuntime {
			return
		}
		if typ, known := t.types[f.StreamId]; known && typ != "error" {
			return
		}
		if b := t.data[f.StreamId]; len(b)+len(f.Data) <= errorStreamMax {
			t.data[f.StreamId] = append(b, f.Data...)
		}
	}
}

// exitCode reads the status the runtime wrote on the error stream, once
// both directions ended.
func (t *exitTap) exitCode() (int32, bool) {
	t.parsers.Wait()
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, typ := range t.types {
		if typ == "error" {
			return parseExitStatus(t.data[id])
		}
	}
	return 0, false
}

// parseExitStatus reads remotecommand v4's metav1.Status: Success is 0,
// NonZeroExitCode carries the code as its ExitCode cause. An empty error
// stream (older protocols end it empty on success) says nothing.
func parseExitStatus(b []byte) (int32, bool) {
	var st struct {
		Status  string `json:"status"`
		Reason  string `json:"reason"`
		Details struct {
			Causes []struct {
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"causes"`
		} `json:"details"`
	}
	if len(b) == 0 || json.Unmarshal(b, &st) != nil {
		return 0, false
	}
	if st.Status == "Success" {
		return 0, true
	}
	if st.Reason != "NonZeroExitCode" {
		return 0, false
	}
	for _, c := range st.Details.Causes {
		if c.Reason == "ExitCode" {
			if n, err := strconv.ParseInt(c.Message, 10, 32); err == nil {
				return int32(n), true
			}
		}
	}
	return 0, false
}
