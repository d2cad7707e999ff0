package proxy

import "sync"

// byteQueue holds a flow's waiting bytes in frame-sized chunks: a queue
// that is filled at the tail while the head drains must not be one slice,
// whose regrowth would copy everything waiting again and again.
type byteQueue struct {
	chunks []*[]byte
	off    int // consumed bytes of chunks[0]
	n      int
}

const chunkSize = h2DefaultMaxFrame

var chunkPool = sync.Pool{New: func() any {
	b := make([]byte, 0, chunkSize)
	return &b
}}

func (q *byteQueue) len() int { return q.n }

func (q *byteQueue) push(p []byte) {
	q.n += len(p)
	for len(p) > 0 {
		if k := len(q.chunks); k > 0 {
			last := q.chunks[k-1]
			if room := cap(*last) - len(*last); room > 0 {
				c := min(room, len(p))
				*last = append(*last, p[:c]...)
				p = p[c:]
				continue
			}
		}
		q.chunks = append(q.chunks, chunkPool.Get().(*[]byte))
	}
}

// head is the first contiguous run of waiting bytes.
func (q *byteQueue) head() []byte {
	if q.n == 0 {
		return nil
	}
	return (*q.chunks[0])[q.off:]
}

func (q *byteQueue) consume(n int) {
	q.n -= n
	q.off += n
	for len(q.chunks) > 0 && q.off >= len(*q.chunks[0]) && (len(q.chunks) > 1 || q.n == 0) {
		q.off -= len(*q.chunks[0])
		q.release(q.chunks[0])
		q.chunks[0] = nil
		q.chunks = q.chunks[1:]
	}
	if len(q.chunks) == 0 {
		q.chunks, q.off = nil, 0
	}
}

func (q *byteQueue) reset() {
	for _, c := range q.chunks {
		q.release(c)
	}
	q.chunks, q.off, q.n = nil, 0, 0
}

func (q *byteQueue) release(c *[]byte) {
	*c = (*c)[:0]
	chunkPool.Put(c)
}
