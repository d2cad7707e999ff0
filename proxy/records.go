package proxy

// records follows a byte stream of records, each a fixed-size header and
// then as many payload bytes as the header says, across chunks cut
// anywhere: gRPC messages in DATA payloads (msgLimit), HTTP/2 frames under
// the framer (continuationTap). It never copies a payload.
type records struct {
	buf  [9]byte // the header being gathered; 9 is the larger, HTTP/2's
	nhdr int
	left uint64 // payload bytes of the current record yet to come
}

// header skips payload and gathers the next whole header of size bytes.
// ok: h is that header, rest what follows it in p, and the caller sets
// left from h. Not ok: p ran out first.
func (r *records) header(p []byte, size int) (h, rest []byte, ok bool) {
	for len(p) > 0 {
		if r.left > 0 {
			n := min(r.left, uint64(len(p)))
			r.left -= n
			p = p[n:]
			continue
		}
		c := copy(r.buf[r.nhdr:size], p)
		r.nhdr += c
		p = p[c:]
		if r.nhdr < size {
			return nil, nil, false
		}
		r.nhdr = 0
		return r.buf[:size], p, true
	}
	return nil, nil, false
}
