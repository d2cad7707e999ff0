package proxy

import (
	"testing"
	"unsafe"
)

// A call allocates one stream on its path; past 512 bytes the allocator
// adds a header to the object and serves it from a larger class, a cost
// on every call's path (see the comment on stream).
func TestStreamFitsTheAllocatorsSmallClass(t *testing.T) {
	if size := unsafe.Sizeof(stream{}); size > 512 {
		t.Fatalf("stream is %d bytes, more than 512: keep its small fields together or move one out", size)
	}
}
