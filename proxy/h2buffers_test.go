package proxy

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCallingConnectionBuffers: a client connection that makes calls holds
// big buffers only the way answers go (its own writer, its runtime
// connection's reader) and small ones the way requests go, 576 KiB in all.
// With ioBufSize both ways it was 1 MiB, which the kubelet's two
// connections made half of crishim's live heap at 110 pods
// (docs/performance.md).
func TestCallingConnectionBuffers(t *testing.T) {
	sock := fakeSock(t)
	startFake(t, sock, &fakeRuntime{})
	p := startProxy(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	const clients = 3
	for range clients {
		conn, err := grpc.NewClient("unix://"+p.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rs := runtimeapi.NewRuntimeServiceClient(conn)
		// Two calls: the buffers grow when the reader has handled a
		// call's frames, which the second call's answer comes after.
		for range 2 {
			if _, err := rs.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Each session's connections, taken while they are open; their sizes
	// are read once the sessions have ended, when nothing changes them.
	r := p.server.relay
	r.mu.Lock()
	var sessions [][]*h2conn
	for s := range r.sessions {
		s.connMu.Lock()
		sessions = append(sessions, append([]*h2conn(nil), s.conns...))
		s.connMu.Unlock()
	}
	r.mu.Unlock()
	p.server.Shutdown(ctx)

	if len(sessions) != clients {
		t.Fatalf("%d sessions, want %d", len(sessions), clients)
	}
	const budget = 576 << 10 // 2 × (ioBufSize + requestBufSize)
	for _, conns := range sessions {
		if len(conns) != 2 {
			t.Errorf("a session has %d connections, want the client's and the runtime's", len(conns))
		}
		total := 0
		for _, c := range conns {
			total += c.br.Size() + c.bw.Size()
		}
		if total > budget {
			t.Errorf("a client connection that made calls holds %d KiB of buffers with its runtime connection, budget %d KiB", total>>10, budget>>10)
		}
		if w := conns[0].bw.Size(); w != ioBufSize {
			t.Errorf("the client's write buffer, where answers go, is %d bytes, want %d", w, ioBufSize)
		}
	}
}
