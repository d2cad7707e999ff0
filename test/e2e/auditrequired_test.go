package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestAuditRequiredRefusesExec: with --audit-required, while the audit log cannot be
// written (its path made a directory), the kubelet's own client gets Unavailable for an
// exec, naming the log and the cause, and nothing runs; once the path is a file again,
// an exec goes through and is audited, without a restart.
func TestAuditRequiredRefusesExec(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	d := startCrishim(t, testbed.Endpoint, "--audit-log", path, "--audit-required")
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "audit-required", sleeperScript)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"echo", "unrecorded"}, Stdout: true})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "--audit-required") {
		t.Fatalf("Exec while the audit log cannot be written: %v, want Unavailable naming %s", err, path)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, end := recordedExec(t, rs, path, ctrID, false, "echo", "recorded"); end.ID == "" {
		t.Error("the exec after the log came back has no audit ID")
	}
}
