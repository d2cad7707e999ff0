package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
)

func readAudit(t *testing.T, path string) []audit.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, err := audit.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// auditEvent waits for the first event match accepts.
func auditEvent(t *testing.T, path, what string, match func(audit.Event) bool) audit.Event {
	t.Helper()
	var found audit.Event
	eventually(t, what, func() error {
		for _, ev := range readAudit(t, path) {
			if match(ev) {
				found = ev
				return nil
			}
		}
		return os.ErrNotExist
	})
	return found
}

// TestAuditLogExec: an exec through crishim's streaming server (SPDY, as
// the kubelet streams) is one started and one ended event with one ID: the
// container, argv, the client's address, then bytes each way and
// the command's exit code. The file is 0600 and holds no token.
func TestAuditLogExec(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	d := startCrishim(t, testbed.Endpoint, "--audit-log", path)
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "audit", sleeperScript)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"sh", "-c", "read l; echo out:$l; exit 7"}, Stdin: true, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	err = spdyExecutor(t, resp.Url).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("hi\n"), Stdout: &stdout})
	if exitCode(err) != 7 || stdout.String() != "out:hi\n" {
		t.Fatalf("exec: %v, %q; want exit 7 and out:hi", err, stdout.String())
	}

	var evs []audit.Event
	eventually(t, "the exec's ended event", func() error {
		// The test's CRI calls are criCall events: it is not the kubelet.
		evs = slices.DeleteFunc(readAudit(t, path), func(ev audit.Event) bool { return ev.Kind == audit.KindCRICall })
		if len(evs) < 2 {
			return os.ErrNotExist
		}
		return nil
	})
	start, end := evs[0], evs[1]
	if start.ID == "" || start.ID != end.ID || start.Stage != audit.StageStarted || end.Stage != audit.StageEnded {
		t.Fatalf("events %+v / %+v: want started and ended with one ID", start, end)
	}
	for _, ev := range []audit.Event{start, end} {
		// Pod namespace, name and UID come from the kubelet's labels, which
		// this CRI-made container lacks (the unit tests cover them).
		if ev.Kind != audit.KindExec || ev.ContainerID != ctrID || ev.ContainerName != "app" ||
			len(ev.Argv) != 3 || !ev.Stdin || ev.ClientAddress == "" {
			t.Errorf("event lacks who or what: %+v", ev)
		}
	}
	if c := start.Caller; c == nil || int(c.PID) != os.Getpid() || c.Kubelet || end.Caller == nil {
		t.Errorf("the exec's caller is %+v; want this test (pid %d), which asked for the stream", c, os.Getpid())
	}
	if end.ExitCode == nil || *end.ExitCode != 7 {
		t.Errorf("ended event exit code %v, want 7", end.ExitCode)
	}
	if end.BytesToRuntime == nil || *end.BytesToRuntime == 0 || end.BytesToClient == nil || *end.BytesToClient == 0 || end.DurationSeconds == nil {
		t.Errorf("ended event lacks bytes or duration: %+v", end)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	token := resp.Url[strings.LastIndex(resp.Url, "/")+1:]
	if strings.Contains(string(raw), token) || strings.Contains(string(raw), "out:hi") {
		t.Error("the audit log holds the token or stream contents")
	}
	t.Logf("audit log:\n%s", raw)
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("audit log mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}
