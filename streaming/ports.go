package streaming

import (
	"net/http"
	"slices"
	"strconv"
)

// portsMax bounds the ports kept for one port-forward's audit event: a
// client opens a stream pair per connection, to as many ports as it likes.
const portsMax = 64

// portsSeen collects the ports a port-forward's client opened streams to,
// for the session's ended audit event: SPDY port-forward names them in each
// stream's headers, never in the CRI request.
type portsSeen struct {
	ports []int32
}

func (p *portsSeen) data(string, []byte) {}

func (p *portsSeen) opened(h http.Header) {
	n, err := strconv.ParseUint(h.Get("port"), 10, 16)
	if err != nil || n == 0 {
		return
	}
	port := int32(n)
	if len(p.ports) < portsMax && !slices.Contains(p.ports, port) {
		p.ports = append(p.ports, port)
	}
}

// list is the ports in order, once the tap's parsers ended.
func (p *portsSeen) list() []int32 {
	out := slices.Clone(p.ports)
	slices.Sort(out)
	return out
}
