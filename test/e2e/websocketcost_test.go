package e2e

import (
	"context"
	"io"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestWebSocketSessionsCostAndLimit: idle WebSocket exec sessions against
// containerd, through crishim, cost what docs/SECURITY.md says (measured
// here on crishim's own metrics), at most --stream-max-websocket-sessions
// are open, the next is refused and counted, and once the clients leave
// crishim is back to its goroutines before.
func TestWebSocketSessionsCostAndLimit(t *testing.T) {
	const n = 20
	d := startCrishim(t, testbed.Endpoint, "--stream-max-websocket-sessions", "20", "--log-level", "info")
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "ws-cost", sleeperScript)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	exec := func(sctx context.Context) error {
		resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"sleep", "600"}, Stdout: true})
		if err != nil {
			return err
		}
		return websocketV5Executor(t, resp.Url).StreamWithContext(sctx, remotecommand.StreamOptions{Stdout: io.Discard})
	}
	before := scrape(t, d.Metrics)
	sctx, hangUp := context.WithCancel(ctx)
	done := make(chan error, n)
	for range n {
		go func() { done <- exec(sctx) }()
	}
	waitUntil(t, ctx, "the sessions to start", func() bool {
		return scrape(t, d.Metrics)["crishim_stream_websocket_sessions_active"] == n
	})
	open := scrape(t, d.Metrics)
	goroutines := (open["go_goroutines"] - before["go_goroutines"]) / n
	heap := (open["go_memstats_heap_inuse_bytes"] - before["go_memstats_heap_inuse_bytes"]) / n
	t.Logf("per idle WebSocket session: %.1f goroutines, %.0f KiB heap in use (%d sessions)", goroutines, heap/1024, n)

	if err := exec(ctx); err == nil {
		t.Error("a session past --stream-max-websocket-sessions ran")
	} else {
		t.Logf("refused: %v", err)
	}
	if v := scrape(t, d.Metrics)["crishim_stream_websocket_sessions_refused_total"]; v != 1 {
		t.Errorf("crishim_stream_websocket_sessions_refused_total %v, want 1", v)
	}

	hangUp()
	for range n {
		<-done
	}
	waitUntil(t, ctx, "crishim's sessions to end", func() bool {
		m := scrape(t, d.Metrics)
		return m["crishim_stream_websocket_sessions_active"] == 0 && m["go_goroutines"] <= before["go_goroutines"]
	})
}
