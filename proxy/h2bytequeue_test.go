package proxy

import (
	"bytes"
	"testing"
)

func TestByteQueueKeepsOrder(t *testing.T) {
	var q byteQueue
	var want []byte
	for i := range 100 {
		p := bytes.Repeat([]byte{byte(i)}, i*97%5000)
		q.push(p)
		want = append(want, p...)
		if i%3 == 0 {
			n := min(len(q.head()), 777)
			if !bytes.Equal(q.head()[:n], want[:n]) {
				t.Fatalf("step %d: head differs", i)
			}
			q.consume(n)
			want = want[n:]
		}
	}
	var got []byte
	for q.len() > 0 {
		h := q.head()
		got = append(got, h...)
		q.consume(len(h))
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("drained %d bytes, want %d in order", len(got), len(want))
	}
}
