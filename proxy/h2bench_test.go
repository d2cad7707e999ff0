package proxy

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkUnaryCall measures one small pass-through call directly, through
// a plain byte-copying pipe and through each relay, all in this process:
// allocs/op and the relay's share of a CPU profile are what to compare, the
// times only within one run.
func BenchmarkUnaryCall(b *testing.B) {
	sock := fakeSock(b)
	startFake(b, sock, &fakeRuntime{})
	targets := map[string]string{"direct": sock, "pipe": startBytePipe(b, sock)}
	for _, relay := range []RelayMode{RelayH2, RelayGRPC} {
		targets[string(relay)] = startProxy(b, relay, sock).sock
	}
	for _, name := range []string{"direct", "pipe", string(RelayH2), string(RelayGRPC)} {
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
