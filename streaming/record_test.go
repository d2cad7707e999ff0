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
			s := &Server{cfg: Config{Record: audit.RecordConfig{Mode: tt.node, Dir: dir}, RecordErrors: errs}}
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
