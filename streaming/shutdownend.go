package streaming

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/moby/spdystream/spdy"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rcconst "k8s.io/apimachinery/pkg/util/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// shutdownMessage is what the client of an exec or attach still open at
// the shutdown timeout is told, as its command's failure: kubectl prints
// it, where a plain cut would look like the command's end.
const shutdownMessage = "crishim is shutting down (restart or stop): session cut after --shutdown-timeout; run the command again"

// tellWait bounds telling those clients, once the shutdown timeout is
// over: a client that reads has its status within a round trip and
// closes; what is still open after tellWait is cut, both sides.
const tellWait = 2 * time.Second

// headMax bounds what is kept of a runtime's upgrade response: a 101 with
// a few headers.
const headMax = 16 << 10

// shutdownStatus is the remotecommand status of a session ended by the
// shutdown.
func shutdownStatus() metav1.Status {
	return metav1.Status{
		Status:  metav1.StatusFailure,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Code:    http.StatusServiceUnavailable,
		Message: shutdownMessage,
	}
}

// keepHead keeps what the proxy read of the runtime's upgrade response.
func (sess *session) keepHead(p []byte) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.headFull || len(p) == 0 {
		return
	}
	if len(sess.head)+len(p) > headMax {
		sess.head, sess.headFull = nil, true
		return
	}
	sess.head = append(sess.head, p...)
}

func (sess *session) isTelling() bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.telling
}

// errorStreamBody is the status a SPDY session's error stream carries in
// the protocol version the runtime answered the upgrade with: from v4 on
// a metav1.Status in JSON, before it the message, as the runtimes' servers
// write them. ok is false when the version is unknown, or the response was
// not read whole and alone: a byte the proxy read past it went to the
// client without being parsed, and the tap no longer knows where frames
// start.
func (sess *session) errorStreamBody() (body []byte, ok bool) {
	sess.mu.Lock()
	head, full := sess.head, sess.headFull
	sess.mu.Unlock()
	if full {
		return nil, false
	}
	r := bytes.NewReader(head)
	br := bufio.NewReader(r)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || br.Buffered() > 0 || r.Len() > 0 {
		return nil, false
	}
	switch resp.Header.Get(httpstream.HeaderProtocolVersion) {
	case rcconst.StreamProtocolV4Name:
		b, err := json.Marshal(shutdownStatus())
		return b, err == nil
	case rcconst.StreamProtocolV3Name, rcconst.StreamProtocolV2Name, rcconst.StreamProtocolV1Name, "":
		return []byte(shutdownMessage), true
	}
	return nil, false
}

// tellClient ends a tapped SPDY exec or attach whose copy to the client
// the shutdown stopped: if the client was sent whole frames only, it
// writes the status on the error stream and ends the stdout and stderr
// streams, as the runtime's server ends a session, then waits for the
// client to close: closing at once could drop frames the client has read
// but not handled yet. Shutdown's cut, tellWait later, bounds the write
// and the wait.
func (sess *session) tellClient(w io.Writer) {
	body, ok := sess.errorStreamBody()
	if !ok {
		return
	}
	frames, ok := sess.tap.endFrames(body)
	if !ok {
		return
	}
	if _, err := w.Write(frames); err != nil {
		return
	}
	select {
	case <-sess.clientEnded:
	case <-sess.ctx.Done():
	}
}

// endFrames are the frames that end a remotecommand session with body on
// its error stream: a DATA frame with body, then empty DATA frames ending
// stdout and stderr, each with FIN, on the streams the runtime replied to
// and has not ended. DATA frames carry no compressed headers, so they need
// none of the zlib state of the runtime's framer. ok is false when the
// client cannot be told: the runtime's direction was not parsed whole, to
// a frame's end, or its error stream is not open.
func (t *spdyTap) endFrames(body []byte) (frames []byte, ok bool) {
	<-t.toClientDone
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.toClientWhole || len(t.replied) >= streamsNoted || len(t.ended) >= streamsNoted {
		return nil, false
	}
	ids := make([]spdy.StreamId, 0, len(t.types))
	errID := spdy.StreamId(0)
	for id, typ := range t.types {
		if !t.replied[id] || t.ended[id] {
			continue
		}
		switch typ {
		case "error":
			errID = id
		case "stdout", "stderr":
			ids = append(ids, id)
		}
	}
	if errID == 0 {
		return nil, false
	}
	slices.Sort(ids)
	var buf bytes.Buffer
	f, err := spdy.NewFramer(&buf, nil)
	if err != nil {
		return nil, false
	}
	if err := f.WriteFrame(&spdy.DataFrame{StreamId: errID, Flags: spdy.DataFlagFin, Data: body}); err != nil {
		return nil, false
	}
	for _, id := range ids {
		if err := f.WriteFrame(&spdy.DataFrame{StreamId: id, Flags: spdy.DataFlagFin}); err != nil {
			return nil, false
		}
	}
	return buf.Bytes(), true
}

// frameTrack follows the frame lengths in the runtime's SPDY bytes to the
// client, so that a copy stopped for the shutdown can pass the rest of the
// frame in flight before the status. It reads only each frame's 8-byte
// header: control and data frames alike end 8 + the length in its low
// 24 bits later.
type frameTrack struct {
	hdr  [8]byte
	n    int   // header bytes held
	body int64 // bytes of the current frame's payload still to pass
}

func (f *frameTrack) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		if f.body > 0 {
			k := min(int64(len(p)), f.body)
			f.body -= k
			p = p[k:]
			continue
		}
		k := copy(f.hdr[f.n:], p)
		f.n += k
		p = p[k:]
		if f.n == len(f.hdr) {
			f.body = int64(binary.BigEndian.Uint32(f.hdr[4:]) & 0xffffff)
			f.n = 0
		}
	}
	return total, nil
}

// left is how many bytes to pass next toward the end of the frame in
// flight: the rest of its header (whose length is not known yet), or of
// its payload; 0 between frames.
func (f *frameTrack) left() int64 {
	if f.n > 0 {
		return int64(len(f.hdr) - f.n)
	}
	return f.body
}
