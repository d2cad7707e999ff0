package proxy

import (
	"bytes"
	"slices"

	"golang.org/x/net/http2/hpack"
)

// A gRPC connection sends nearly the same header blocks call after call:
// once the first call has put its fields in the HPACK dynamic tables, a
// request, its response headers and its trailers are each a few bytes of
// indexed fields, the same bytes every time. Decoding them again (with
// the framer's checks on every field) and encoding the same fields again
// for the other hop (two map lookups per field) was about a third of the
// relay's own CPU on the critical path of a small call, run cold each time
// on a node where the kubelet's calls are spread out.
//
// The memos below remember the last few such blocks per connection and
// direction. They are only ever used where HPACK guarantees the same bytes
// mean the same fields: an indexed field changes no table (RFC 7541
// §6.1), so a block made only of indexed fields, decoded or encoded under
// the same table, means or becomes what it did before. Any block that may
// have changed a table starts a new generation, which forgets every entry.

// memoEntries is how many blocks each memo keeps: a request, response
// headers and trailers, with room for a second method's request.
const memoEntries = 4

// maxMemoBlock bounds the blocks the memos keep: one byte per indexed
// field, and a gRPC call has about ten.
const maxMemoBlock = 32

// indexedOnly says whether block is made only of indexed fields whose
// index fits in one byte (RFC 7541 §6.1: a set high bit, an index of 1 to
// 126). Such a block leaves the decoder's table as it was; anything else
// (a literal, a table size update, a longer index) is decoded afresh.
func indexedOnly(block []byte) bool {
	if len(block) == 0 || len(block) > maxMemoBlock {
		return false
	}
	for _, b := range block {
		if b&0x80 == 0 || b == 0x80 || b == 0xff {
			return false
		}
	}
	return true
}

// decodeMemo maps indexed-only blocks to the fields they decoded to, at
// the decoder's current table.
type decodeMemo struct {
	gen     uint64 // bumped whenever the table may have changed
	next    int
	entries [memoEntries]decodedBlock
}

type decodedBlock struct {
	gen    uint64
	n      int
	block  [maxMemoBlock]byte
	fields []hpack.HeaderField
}

// lookup returns the fields block decoded to before, or nil.
func (m *decodeMemo) lookup(block []byte) []hpack.HeaderField {
	for i := range m.entries {
		e := &m.entries[i]
		if e.gen == m.gen && bytes.Equal(e.block[:e.n], block) {
			return e.fields
		}
	}
	return nil
}

// decoded records what a block decoded to: an indexed-only block that
// passed every check is kept, any other block may have changed the table.
func (m *decodeMemo) decoded(block []byte, fields []hpack.HeaderField, valid bool) {
	if !indexedOnly(block) {
		m.gen++
		return
	}
	if !valid {
		return
	}
	e := &m.entries[m.next]
	m.next = (m.next + 1) % memoEntries
	e.gen, e.n = m.gen, copy(e.block[:], block)
	e.fields = append(e.fields[:0], fields...)
}

// encodeMemo maps field lists to the indexed-only blocks they encoded to,
// at the encoder's current table. An entry never filled matches only an
// empty block or list, and answers it with nothing, which is a miss.
type encodeMemo struct {
	gen     uint64
	next    int
	entries [memoEntries]encodedBlock
}

type encodedBlock struct {
	gen    uint64
	fields []hpack.HeaderField
	block  []byte
}

// lookup returns the block fields encoded to before, or nil.
func (m *encodeMemo) lookup(fields []hpack.HeaderField) []byte {
	for i := range m.entries {
		e := &m.entries[i]
		if e.gen == m.gen && slices.Equal(e.fields, fields) {
			return e.block
		}
	}
	return nil
}

// encoded records what fields encoded to; indexedOnly says whether every
// field came out as an index, which left the table as it was. A list
// longer than any gRPC call's is not kept: the memo would hold it for the
// connection's life.
func (m *encodeMemo) encoded(fields []hpack.HeaderField, block []byte, indexedOnly bool) {
	if !indexedOnly {
		m.gen++
		return
	}
	if len(block) > maxMemoBlock {
		return
	}
	e := &m.entries[m.next]
	m.next = (m.next + 1) % memoEntries
	e.gen = m.gen
	e.fields = append(e.fields[:0], fields...)
	e.block = append(e.block[:0], block...)
}

// tableChanged forgets every entry: the peer changed the table's size.
func (m *encodeMemo) tableChanged() { m.gen++ }
