package shim

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestParseSignal(t *testing.T) {
	tests := []struct {
		in   string
		num  int
		name string // empty: an error
	}{
		{"SIGHUP", 1, "SIGHUP"},
		{"hup", 1, "SIGHUP"},
		{" sigusr1 ", 10, "SIGUSR1"},
		{"1", 1, "SIGHUP"},
		{"15", 15, "SIGTERM"},
		{"SIGIOT", 6, "SIGABRT"},
		{"CLD", 17, "SIGCHLD"},
		{"SIGPOLL", 29, "SIGIO"},
		{"SIGRTMIN", 34, "SIGRTMIN"},
		{"SIGRTMIN+1", 35, "SIGRTMIN+1"},
		{"RTMIN+15", 49, "SIGRTMIN+15"},
		{"SIGRTMAX-14", 50, "SIGRTMAX-14"},
		{"64", 64, "SIGRTMAX"},
		{"50", 50, "SIGRTMAX-14"},
		{"49", 49, "SIGRTMIN+15"},
		{"0", 0, ""},
		{"32", 0, ""},
		{"65", 0, ""},
		{"-1", 0, ""},
		{"SIGFOO", 0, ""},
		{"", 0, ""},
		{"SIGRTMIN-1", 0, ""},
		{"SIGRTMIN+x", 0, ""},
		{"SIGRTMAX+1", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseSignal(tt.in)
			if tt.name == "" {
				if err == nil {
					t.Fatalf("parseSignal(%q) = %+v; want an error", tt.in, got)
				}
				return
			}
			if err != nil || got.num != tt.num || got.name != tt.name {
				t.Fatalf("parseSignal(%q) = %+v, %v; want %d %s", tt.in, got, err, tt.num, tt.name)
			}
		})
	}
}

// TestCRISignalsRoundTrip: every signal the CRI can name maps to a Linux
// signal and back to the same enum value.
func TestCRISignalsRoundTrip(t *testing.T) {
	seen := map[int]bool{}
	for v := range runtimeapi.Signal_name {
		if v == 0 {
			continue
		}
		sig, ok := criSignal(runtimeapi.Signal(v))
		if !ok {
			t.Errorf("CRI %s has no Linux signal", runtimeapi.Signal(v))
			continue
		}
		seen[sig.num] = true
		back, ok := toCRISignal(sig)
		if !ok {
			t.Errorf("%s has no CRI value", sig.name)
			continue
		}
		if back != runtimeapi.Signal(v) {
			// Aliases (SIGIOT, SIGCLD, SIGPOLL) come back as their canonical name.
			if again, _ := criSignal(back); again != sig {
				t.Errorf("CRI %s -> %s -> %s", runtimeapi.Signal(v), sig.name, back)
			}
		}
	}
	for _, want := range []int{1, 10, 15, 34, 35, 50, 64} {
		if !seen[want] {
			t.Errorf("signal %d not reachable from the CRI enum", want)
		}
	}
	if _, ok := criSignal(runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT); ok {
		t.Error("RUNTIME_DEFAULT maps to a signal")
	}
	if sig, _ := criSignal(runtimeapi.Signal_SIGNAL_SIGUSR1); sig.num != 10 {
		t.Errorf("SIGNAL_SIGUSR1 -> %+v", sig)
	}
}
