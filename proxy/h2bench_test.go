package proxy

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkUnaryCall measures one small pass-through call directly, through
// a plain byte-copying pipe and through the relay (h2), all in this process:
// allocs/op and the relay's share of a CPU profile are what to compare, the
// times only within one run.
func BenchmarkUnaryCall(b *testing.B) {
	sock := fakeSock(b)
	startFake(b, sock, &fakeRuntime{})
	targets := map[string]string{"direct": sock, "pipe": startBytePipe(b, sock), "h2": startProxy(b, sock).sock}
	for _, name := range []string{"direct", "pipe", "h2"} {
		b.Run(name, func(b *testing.B) {
			conn, err := grpc.NewClient("unix://"+targets[name], grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := runtimeapi.NewRuntimeServiceClient(conn)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// startBytePipe copies bytes between each connection on a new socket and a
// fresh connection to backend: the floor any user-space hop costs.
func startBytePipe(b *testing.B, backend string) string {
	sock := filepath.Join(b.TempDir(), "pipe.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("unix", backend)
			if err != nil {
				_ = c.Close()
				continue
			}
			b.Cleanup(func() { _ = c.Close(); _ = u.Close() })
			go func() { _, _ = io.Copy(u, c) }()
			go func() { _, _ = io.Copy(c, u) }()
		}
	}()
	return sock
}

// maxRelayAllocs bounds the relay's own allocations per relayed unary
// call, the frames x/net's framer allocates aside. It was 1.00 a call on
// a warm connection when this was set (the call's stream; a grown buffer
// or a window update now and then); the ack of a peer's PING, every few calls, allocated
// until this test found it. The bound guards against a change that
// allocates on every call's path (one more per call fails it: tried), in
// place of tests of struct layout, which said nothing about it.
//
// The framer allocates each frame it reads but DATA (its HEADERS,
// WINDOW_UPDATE, PING): about 5 a call, 3 of them the call's header
// blocks and the rest as many as the peers' bandwidth probes, which come
// by timing. They are logged, not bounded.
const maxRelayAllocs = 1.1

// TestRelayedUnaryCallAllocations: a Version call through the relay
// allocates at most maxRelayAllocs in the relay's own code. The client's
// and the fake runtime's allocations (about 170 a call, moving with
// grpc-go's pools and with how the relay batches frames) are left out:
// every allocation is sampled (MemProfileRate 1) and only those made
// under a session's goroutines (session.run, session.readUpstream) count.
func TestRelayedUnaryCallAllocations(t *testing.T) {
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 1
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	conn, err := grpc.NewClient("unix://"+startProxy(t, sock).sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	call := func() {
		if _, err := client.Version(context.Background(), &runtimeapi.VersionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	// Warm: the connections are made, the buffers grown, the HPACK tables
	// filled.
	for range 100 {
		call()
	}
	calls := 2000
	if testing.Short() {
		calls = 500 // make unit's guard: a 0.002 resolution is plenty for a bound of 1.1
	}
	own0, framer0 := relayAllocs()
	for range calls {
		call()
	}
	own1, framer1 := relayAllocs()
	own, framer := float64(own1-own0)/float64(calls), float64(framer1-framer0)/float64(calls)
	t.Logf("per Version call, the relay allocated %.3f times, its framer %.3f", own, framer)
	if own > maxRelayAllocs {
		t.Errorf("the relay allocates %.3f times per relayed call, want at most %v", own, maxRelayAllocs)
	}
}

// relayAllocs counts the allocations made so far under a session's
// goroutines, apart (framer) and without (own) those of the framer's
// ReadFrame, as of a garbage collection it runs (the profile is published
// at the end of a cycle).
func relayAllocs() (own, framer int64) {
	runtime.GC()
	runtime.GC()
	var records []runtime.MemProfileRecord
	for {
		n, ok := runtime.MemProfile(records, true)
		if ok {
			records = records[:n]
			break
		}
		records = make([]runtime.MemProfileRecord, n+64)
	}
	for _, r := range records {
		inFramer := false
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			switch f.Function {
			case "golang.org/x/net/http2.(*Framer).ReadFrame":
				inFramer = true
			case "github.com/crishim/crishim/proxy.(*session).run",
				"github.com/crishim/crishim/proxy.(*session).readUpstream":
				if inFramer {
					framer += r.AllocObjects
				} else {
					own += r.AllocObjects
				}
				more = false
			}
			if !more {
				break
			}
		}
	}
	return own, framer
}
