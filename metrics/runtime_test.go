package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRuntimeConnectionCountsOnlyReconnects(t *testing.T) {
	m := New("test", "abc", nil)
	m.RuntimeConnection("runtime", false) // start: not connected yet
	m.RuntimeConnection("runtime", true)  // first connection
	if got := testutil.ToFloat64(m.runtime.reconnects.WithLabelValues("runtime")); got != 0 {
		t.Errorf("reconnects after the first connection = %v, want 0", got)
	}
	m.RuntimeConnection("runtime", false)
	if got := testutil.ToFloat64(m.runtime.up.WithLabelValues("runtime")); got != 0 {
		t.Errorf("up while down = %v", got)
	}
	m.RuntimeConnection("runtime", true)
	m.RuntimeConnection("runtime", false)
	m.RuntimeConnection("runtime", true)
	if got := testutil.ToFloat64(m.runtime.reconnects.WithLabelValues("runtime")); got != 2 {
		t.Errorf("reconnects = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.runtime.up.WithLabelValues("runtime")); got != 1 {
		t.Errorf("up = %v, want 1", got)
	}
}

// TestEveryMetricOnceWithConventionalNames: one registry with every
// feature's set on it as crishim builds it (a name taken twice panics),
// each family once, crishim's own under the crishim_ prefix, and nothing
// promlint objects to.
func TestEveryMetricOnceWithConventionalNames(t *testing.T) {
	m := New("test", "abc", []string{"/a.B/C"})
	m.RuntimeConnection("runtime", true)
	NewPIDTarget(m.Registry).Request("create", "native", "OK")
	NewSignals(m.Registry).Stop("exited")
	NewStreaming(m.Registry).TokenIssued("exec")
	NewIdempotent(m.Registry).NotFound("/a.B/C")
	NewNotifications(m.Registry).Run("succeeded")
	NewDebugImages(m.Registry).Check("allowed")
	NewAudit(m.Registry).AuditError()
	NewConfig(m.Registry)
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		name := f.GetName()
		if seen[name] {
			t.Errorf("%s gathered twice", name)
		}
		seen[name] = true
		if !strings.HasPrefix(name, "crishim_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			t.Errorf("%s lacks the crishim_ prefix", name)
		}
	}
	for _, want := range []string{"crishim_build_info", "crishim_runtime_up", "go_goroutines", "process_resident_memory_bytes",
		"crishim_pid_target_requests_total", "crishim_stop_signal_stops_total", "crishim_stream_tokens_issued_total",
		"crishim_idempotent_notfound_total", "crishim_notifications_runs_total", "crishim_debug_image_checks_total",
		"crishim_audit_errors_total", "crishim_config_reloads_total"} {
		if !seen[want] {
			t.Errorf("%s not exported", want)
		}
	}
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
}
