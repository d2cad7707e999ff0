package main

import "testing"

// TestEveryFeatureMetricIsServed: each feature's set is on the registry
// /metrics serves, not on one of its own.
func TestEveryFeatureMetricIsServed(t *testing.T) {
	m := newMetrics()
	m.target.Request("create", "native", "OK")
	m.signals.Stop("exited")
	m.streaming.TokenIssued("exec")
	m.idempotent.NotFound("/runtime.v1.RuntimeService/StopContainer")
	m.notifications.Run("succeeded")
	m.debugImages.Check("allowed")
	m.audit.AuditError()
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, f := range families {
		served[f.GetName()] = true
	}
	for _, want := range []string{
		"crishim_pid_target_requests_total",
		"crishim_stop_signal_stops_total",
		"crishim_stream_tokens_issued_total",
		"crishim_idempotent_notfound_total",
		"crishim_notifications_runs_total",
		"crishim_debug_image_checks_total",
		"crishim_audit_errors_total",
		"crishim_config_reloads_total",
		"crishim_relay_protocol_errors_total",
	} {
		if !served[want] {
			t.Errorf("%s is not on the registry /metrics serves", want)
		}
	}
}
