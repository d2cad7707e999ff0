package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/test/crishimproc"
)

// readyz returns the HTTP status of crishim's /readyz.
func readyz(t *testing.T, d *crishimproc.Process) int {
	t.Helper()
	resp, err := http.Get("http://" + d.Metrics + "/readyz")
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// eventually polls cond until it holds or the bound passes; the bound only
// turns a hang into a failure, it is not a performance threshold.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after 60s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRecoveryWhenContainerdRestarts kills containerd under a running
// crishim: calls fail with Unavailable and /readyz says 503; once containerd
// is back, crishim serves again without a restart, and the container that
// ran throughout is still there.
func TestRecoveryWhenContainerdRestarts(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, d.Endpoint)
	ctx := context.Background()
	if code := readyz(t, d); code != http.StatusOK {
		t.Fatalf("/readyz with containerd up = %d", code)
	}
	name := uniqueName("recovery")
	podCfg := podConfig(t, name, nil)
	podID := runPod(t, rs, podCfg)
	ctrID := startContainer(t, rs, podID, podCfg, containerConfig("survivor", "exec sleep 3600", nil))

	if err := testbed.Kill(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			if err := testbed.Restart(context.Background()); err != nil {
				t.Errorf("restart containerd in cleanup: %v", err)
			}
		}
	})
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := rs.Version(cctx, "v1")
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Version with containerd down: %v, want Unavailable", err)
	}
	if code := readyz(t, d); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with containerd down = %d, want 503", code)
	}

	if err := testbed.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	eventually(t, "Version through crishim after containerd restart", func() error {
		_, err := rs.Version(ctx, "v1")
		return err
	})
	// /readyz asks through the backend's own gRPC connection, which reconnects when
	// containerd's socket is created anew, as the relay does (docs/architecture.md);
	// it may still lag the relay's first answer by a reconnect.
	eventually(t, "/readyz after containerd restart", func() error {
		if code := readyz(t, d); code != http.StatusOK {
			return fmt.Errorf("/readyz = %d", code)
		}
		return nil
	})
	cs, err := rs.ContainerStatus(ctx, ctrID, false)
	if err != nil || cs.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("container after containerd restart: %v, %v", cs.GetStatus().GetState(), err)
	}
}
