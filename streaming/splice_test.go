package streaming

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
)

func TestSpliceCountedMovesAndCountsEveryByte(t *testing.T) {
	client, proxyIn := tcpPair(t)
	proxyOut, runtime := tcpPair(t)
	var counted, calls atomic.Int64
	type result struct {
		n   int64
		err error
		ok  bool
	}
	done := make(chan result, 1)
	go func() {
		n, err, ok := spliceCounted(proxyOut, proxyIn, func(n int64) { counted.Add(n); calls.Add(1) })
		done <- result{n, err, ok}
	}()
	want := bytes.Repeat([]byte("crishim!"), (5<<20+3)/8+1)[:5<<20+3]
	go func() {
		_, _ = client.Write(want)
		_ = client.CloseWrite()
	}()
	got, err := io.ReadAll(io.LimitReader(runtime, int64(len(want))))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (%v), want the %d written", len(got), err, len(want))
	}
	r := <-done
	if !r.ok || r.err != nil || r.n != int64(len(want)) {
		t.Fatalf("spliceCounted = %d, %v, %v; want %d, nil, true", r.n, r.err, r.ok, len(want))
	}
	if counted.Load() != int64(len(want)) || calls.Load() < 2 {
		t.Errorf("counted %d bytes in %d chunks, want %d in several", counted.Load(), calls.Load(), len(want))
	}
}

func TestSpliceCountedEndsWhenAConnectionCloses(t *testing.T) {
	_, proxyIn := tcpPair(t)
	proxyOut, _ := tcpPair(t)
	done := make(chan error, 1)
	go func() {
		_, err, _ := spliceCounted(proxyOut, proxyIn, func(int64) {})
		done <- err
	}()
	_ = proxyIn.Close() // as a session cut does
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("after close: %v, want net.ErrClosed", err)
	}
}

func TestSpliceCountedLeavesOtherConnectionsAlone(t *testing.T) {
	a, b := tcpPair(t)
	if _, _, ok := spliceCounted(noCopyMethods{a}, b, func(int64) {}); ok {
		t.Error("a wrapped connection (as *tls.Conn would be) took the splice path")
	}
}
