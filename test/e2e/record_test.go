package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
)

// recordedExec runs cmd through crishim's streaming server over SPDY, as
// the kubelet streams, with a 123x45 terminal when tty, and returns the
// session's ended audit event, which must carry the exit code.
func recordedExec(t *testing.T, rs interface {
	Exec(context.Context, *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
}, auditPath, ctrID string, tty bool, cmd ...string) (string, audit.Event) {
	t.Helper()
	return recordedExecWith(t, spdyExecutor, rs, auditPath, ctrID, tty, cmd...)
}

// recordedExecWith is recordedExec with the client newExec makes.
func recordedExecWith(t *testing.T, newExec func(*testing.T, string) remotecommand.Executor, rs interface {
	Exec(context.Context, *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
}, auditPath, ctrID string, tty bool, cmd ...string) (string, audit.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: cmd, Tty: tty, Stdin: tty, Stdout: true})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	opts := remotecommand.StreamOptions{Stdout: &out, Tty: tty}
	if tty {
		tm := newTerminal()
		tm.sizes <- remotecommand.TerminalSize{Width: 123, Height: 45}
		close(tm.sizes)
		// stty reads the terminal's size from its stdin; nothing is
		// typed. The command waits for the size: the client sends it
		// beside the process start, not before.
		opts.TerminalSizeQueue, opts.Stdin = tm, tm.inR
		defer tm.in.Close()
	}
	if err := newExec(t, resp.Url).StreamWithContext(ctx, opts); err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	end := auditEvent(t, auditPath, "the exec's ended event", func(ev audit.Event) bool {
		return ev.Stage == audit.StageEnded && ev.ContainerID == ctrID && strings.Join(ev.Argv, " ") == strings.Join(cmd, " ")
	})
	// The recording and the exit code share one parse of the streams.
	if end.ExitCode == nil || *end.ExitCode != 0 {
		t.Errorf("ended event exit code %v, want 0", end.ExitCode)
	}
	return out.String(), end
}

// ttyScript waits for the client's terminal size, prints it and a marker, and
// lingers a moment: CRI-O can lose all the output of a TTY exec that exits at
// once, directly as through crishim (cri-o/cri-o#8483; 2 of 50 such execs here,
// none of 80 with the pause).
const ttyScript = "until [ \"$(stty size 2>/dev/null)\" = \"45 123\" ]; do sleep 0.1; done; stty size; echo rec-$((6*7)); sleep 0.5"

// TestRecordSessionsTTY: with --record-sessions tty a TTY exec becomes an
// asciicast v2 file, 0600, whose header has the client's terminal size and
// command and whose output events hold what the command printed; the
// audit event names it. A non-TTY exec is not recorded.
func TestRecordSessionsTTY(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions")
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	d := startCrishim(t, testbed.Endpoint, "--record-sessions", "tty", "--record-dir", dir, "--audit-log", auditPath)
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "record", sleeperScript)

	out, end := recordedExec(t, rs, auditPath, ctrID, true, "sh", "-c", ttyScript)
	if !strings.Contains(out, "45 123") || !strings.Contains(out, "rec-42") {
		t.Fatalf("exec printed %q", out)
	}
	if end.Recording == "" || filepath.Dir(end.Recording) != dir || !strings.HasSuffix(end.Recording, "-"+end.ID+".cast") {
		t.Fatalf("ended event recording %q, want %s/<time>-%s.cast", end.Recording, dir, end.ID)
	}
	hdr, shown := castOutput(t, end.Recording)
	if hdr.Width != 123 || hdr.Height != 45 || hdr.Command != "sh -c "+ttyScript || hdr.Timestamp == 0 {
		t.Errorf("header %+v: want 123x45, the command, a timestamp", hdr)
	}
	if !strings.Contains(shown, "45 123") || !strings.Contains(shown, "rec-42") {
		t.Errorf("output events %q lack the command's output", shown)
	}
	for path, mode := range map[string]os.FileMode{dir: 0o700, end.Recording: 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v (%v), want %v", path, fi.Mode().Perm(), err, mode)
		}
	}

	_, plain := recordedExec(t, rs, auditPath, ctrID, false, "echo", "not-recorded")
	if plain.Recording != "" {
		t.Errorf("a non-TTY exec under tty mode was recorded: %q", plain.Recording)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.cast")); len(files) != 1 {
		t.Errorf("recordings %v, want only the TTY session's", files)
	}
}

// TestRecordSessionsPodAnnotation: a pod annotated
// crishim.io/record-sessions=all has its non-TTY execs recorded on a node
// that records nothing, stdout as output events.
func TestRecordSessionsPodAnnotation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions")
	auditPath := filepath.Join(t.TempDir(), "audit.log")
	d := startCrishim(t, testbed.Endpoint, "--record-dir", dir, "--audit-log", auditPath)
	rs, _ := criClients(t, d.Endpoint)
	pod := podConfig(t, uniqueName("record-annotated"), nil)
	pod.Annotations[audit.RecordAnnotation] = "all"
	podID := runPod(t, rs, pod)
	ctrID := startContainer(t, rs, podID, pod, containerConfig("app", sleeperScript, nil))

	_, end := recordedExec(t, rs, auditPath, ctrID, false, "echo", "annotated-out")
	if end.Recording == "" {
		t.Fatal("the annotated pod's exec was not recorded")
	}
	raw, err := os.ReadFile(end.Recording)
	if err != nil || !strings.Contains(string(raw), `"o", "annotated-out\n"`) {
		t.Errorf("recording %s (%v) lacks the output event", raw, err)
	}
}
