package streaming

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
)

// TestStartRecording: which sessions the node's mode and the pod's
// annotation select; port-forward never; a directory that cannot be made
// is counted.
func TestStartRecording(t *testing.T) {
	tty := &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"sh"}, Tty: true}
	plain := &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"ls"}}
	tests := []struct {
		name     string
		node     audit.RecordMode
		pod      audit.RecordMode
		kind     Kind
		req      any
		dir      string
		recorded bool
		warn     string
		errs     int
	}{
		{"tty exec, tty mode", audit.RecordTTY, "", Exec, tty, "", true, "", 0},
		{"plain exec, tty mode", audit.RecordTTY, "", Exec, plain, "", false, "", 0},
		{"plain exec, all mode", audit.RecordAll, "", Exec, plain, "", true, "", 0},
		{"tty attach, pod asks", audit.RecordNone, audit.RecordTTY, Attach, &runtimeapi.AttachRequest{Tty: true}, "", true, "", 0},
		{"port-forward, all mode", audit.RecordAll, audit.RecordAll, PortForward, &runtimeapi.PortForwardRequest{}, "", false, "", 0},
		{"unwritable dir", audit.RecordAll, "", Exec, tty, "/dev/null/sessions", false, "session not recorded", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir
			if dir == "" {
				dir = filepath.Join(t.TempDir(), "sessions")
			}
			errs := &countRecordErrors{}
			s := &Server{cfg: Config{Record: audit.RecordConfig{Mode: tt.node, Dir: dir}}, recordErrors: errs}
			var logs bytes.Buffer
			rec := s.startRecording(tt.kind, pending{req: tt.req, record: tt.pod}, "id1", slog.New(slog.NewTextHandler(&logs, nil)))
			if (rec != nil) != tt.recorded {
				t.Fatalf("recorded %v, want %v", rec != nil, tt.recorded)
			}
			if rec != nil {
				rec.close()
				if _, err := os.Stat(rec.path); err != nil || !strings.HasSuffix(rec.path, "-id1.cast") {
					t.Errorf("recording %s: %v", rec.path, err)
				}
			}
			if tt.warn != "" && !strings.Contains(logs.String(), tt.warn) {
				t.Errorf("log %q lacks %q", logs.String(), tt.warn)
			}
			if errs.n != tt.errs {
				t.Errorf("%d record errors, want %d", errs.n, tt.errs)
			}
		})
	}
}

// TestRecordDirectoryBound: with --record-max-total-bytes, a session
// starting while the directory is full is not recorded and a recording
// that reaches the bound stops, each counted; the session is not touched.
func TestRecordDirectoryBound(t *testing.T) {
	dir := t.TempDir()
	errs := &countRecordErrors{}
	s := &Server{
		cfg:          Config{Record: audit.RecordConfig{Mode: audit.RecordAll, Dir: dir}},
		recordErrors: errs,
		recordBudget: audit.NewRecordBudget(dir, 1000),
	}
	req := pending{req: &runtimeapi.ExecRequest{ContainerId: "c", Cmd: []string{"ls"}}}
	log := slog.New(slog.DiscardHandler)

	rec := s.startRecording(Exec, req, "id1", log)
	if rec == nil {
		t.Fatal("an empty directory refused a recording")
	}
	rec.data("stdout", bytes.Repeat([]byte("o"), 2000))
	rec.close()
	if errs.n != 1 {
		t.Errorf("%d record errors after a recording reached the bound, want 1", errs.n)
	}
	if fi, err := os.Stat(rec.path); err != nil || fi.Size() > 1000 {
		t.Fatalf("recording %v (%v): want at most 1000 bytes", fi, err)
	}

	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	if rec := s.startRecording(Exec, req, "id2", log); rec != nil {
		rec.close()
		t.Fatal("a full directory took a new recording")
	}
	if errs.n != 2 {
		t.Errorf("%d record errors after a refused recording, want 2", errs.n)
	}
}
