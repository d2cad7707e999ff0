package streaming

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"

	"github.com/moby/spdystream/spdy"
)

// TestPortsTap: an audited port-forward's client direction gives the ports
// its streams name (each once, in order, at most portsMax), whatever the
// data between; nothing is kept per stream.
func TestPortsTap(t *testing.T) {
	c := newSPDYFrames(t)
	open := func(id spdy.StreamId, typ, port string) {
		h := http.Header{}
		h.Set("streamtype", typ)
		h.Set("port", port)
		if err := c.f.WriteFrame(&spdy.SynStreamFrame{StreamId: id, Headers: h}); err != nil {
			t.Fatal(err)
		}
	}
	id := spdy.StreamId(1)
	for _, port := range []string{"8080", "80", "8080", "0", "http", "70000"} {
		open(id, "error", port)
		open(id+2, "data", port)
		c.data(t, id+2, "payload")
		id += 4
	}
	for p := 1000; p < 1000+2*portsMax; p++ {
		open(id, "data", strconv.Itoa(p))
		id += 2
	}
	sess := &session{}
	sess.tapPorts(true)
	w, end := sess.tap.writer(true)
	if _, err := io.Copy(w, bytes.NewReader(c.buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	end()
	sess.tap.wait()
	got := sess.ports.list()
	if len(got) != portsMax || !slices.Contains(got, 80) || !slices.Contains(got, 8080) || !slices.IsSorted(got) {
		t.Errorf("ports %v: want %d of them, sorted, with 80 and 8080", got, portsMax)
	}
	if len(sess.tap.types) != 0 || len(sess.tap.held) != 0 {
		t.Errorf("the tap kept %d stream types and %d held streams", len(sess.tap.types), len(sess.tap.held))
	}
}
