package harness

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestRuntimeFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env     string
		want    Runtime
		wantErr bool
	}{
		{"", RuntimeContainerd, false},
		{"containerd", RuntimeContainerd, false},
		{"crio", RuntimeCRIO, false},
		{"containerd-1.6", RuntimeContainerd16, false},
		{"docker", "", true},
		{"Containerd", "", true},
	} {
		t.Setenv(RuntimeEnv, tc.env)
		got, err := RuntimeFromEnv()
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("RUNTIME=%q: %q, %v; want %q (error %v)", tc.env, got, err, tc.want, tc.wantErr)
		}
		if err != nil {
			for _, r := range Runtimes {
				if !strings.Contains(err.Error(), string(r)) {
					t.Errorf("RUNTIME=%q: error %q does not name %s", tc.env, err, r)
				}
			}
		}
	}
}

// TestCRIONotBuiltIn: until its backend exists, asking for CRI-O fails at once and says so.
func TestCRIONotBuiltIn(t *testing.T) {
	_, err := Start(context.Background(), Options{Runtime: RuntimeCRIO})
	if !errors.Is(err, errCRIONotBuilt) || !strings.Contains(err.Error(), "CRI-O support is not built into this harness yet") {
		t.Fatalf("Start(crio) = %v; want %v", err, errCRIONotBuilt)
	}
}

func TestContainerd2ConfigKeepsSharedPlacesOut(t *testing.T) {
	l := layout{slotDir(MaxSlots - 1)}
	cfg := containerd2Config(l, PauseImage)
	for _, want := range []string{
		"version = 3",
		`[plugins."io.containerd.nri.v1.nri"]` + "\n    disable = true",
		"socket_dir = " + `"` + l.shimSockets() + `"`,
		"sandbox = " + `"` + PauseImage + `"`,
		"restrict_oom_score_adj = true",
		"SystemdCgroup = false",
		`stream_server_address = "127.0.0.1"`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("containerd 2 config lacks %q:\n%s", want, cfg)
		}
	}
	// containerd refuses a longer socket_dir (maxSocketDirLen on Linux).
	if n := len(l.shimSockets()); n > 42 {
		t.Errorf("shim socket dir %s is %d bytes, containerd allows 42", l.shimSockets(), n)
	}
}
