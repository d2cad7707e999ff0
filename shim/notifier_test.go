package shim

import (
	"strings"
	"testing"
	"time"
)

func TestParseNotifier(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		action  string
		timeout time.Duration
		probe   bool
		err     string // part of the error; empty: valid
	}{
		{name: "exec", value: `{"exec":["sh","-c","sync"]}`, action: "exec", timeout: time.Second},
		{name: "signal", value: `{"signal":"SIGHUP"}`, action: "signal", timeout: time.Second},
		{name: "signal by number", value: `{"signal":"1"}`, action: "signal", timeout: time.Second},
		{name: "timeout and probe", value: `{"exec":["true"],"timeoutSeconds":30,"probe":{"exec":["test","-f","/done"]}}`, action: "exec", timeout: 30 * time.Second, probe: true},
		{name: "not json", value: `exec sync`, err: "not a notifier"},
		{name: "unknown field", value: `{"exec":["true"],"timeoutSecond":5}`, err: `unknown field "timeoutSecond"`},
		{name: "no action", value: `{"timeoutSeconds":5}`, err: "no action"},
		{name: "empty exec", value: `{"exec":[]}`, err: "no action"},
		{name: "both actions", value: `{"exec":["true"],"signal":"SIGHUP"}`, err: "one action"},
		{name: "unknown signal", value: `{"signal":"SIGFOO"}`, err: "signal:"},
		{name: "timeout zero", value: `{"signal":"HUP","timeoutSeconds":0}`, err: "timeoutSeconds: 0 is out of range 1..3600"},
		{name: "timeout negative", value: `{"signal":"HUP","timeoutSeconds":-3}`, err: "out of range 1..3600"},
		{name: "timeout at the maximum", value: `{"signal":"HUP","timeoutSeconds":3600}`, action: "signal", timeout: time.Hour},
		{name: "timeout above the maximum", value: `{"signal":"HUP","timeoutSeconds":3601}`, err: "timeoutSeconds: 3601 is out of range 1..3600"},
		// 9223372037 s is more than time.Duration holds: it wrapped negative.
		{name: "timeout overflowing a duration", value: `{"signal":"HUP","timeoutSeconds":9223372037}`, err: "timeoutSeconds: 9223372037 is out of range"},
		{name: "timeout the largest int64", value: `{"signal":"HUP","timeoutSeconds":9223372036854775807}`, err: "out of range"},
		{name: "timeout beyond int64", value: `{"signal":"HUP","timeoutSeconds":9223372036854775808}`, err: "timeoutSeconds"},
		{name: "timeout fractional", value: `{"signal":"HUP","timeoutSeconds":1.5}`, err: "timeoutSeconds"},
		{name: "probe without command", value: `{"signal":"HUP","probe":{}}`, err: "probe: no exec"},
		{name: "two values", value: `{"signal":"HUP"} {"signal":"HUP"}`, err: "more than one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := parseNotifier(tt.value)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parseNotifier(%s) = %+v, %v; want an error with %q", tt.value, n, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.action() != tt.action || n.timeout != tt.timeout || (len(n.probe) > 0) != tt.probe {
				t.Errorf("parseNotifier(%s) = %+v", tt.value, n)
			}
		})
	}
}

func TestDeclarations(t *testing.T) {
	annotations := map[string]string{
		"notifier.crishim.io/db.quiesce":     `{"exec":["sync"]}`,
		"notifier.crishim.io/web.quiesce":    `{"exec":`,
		"notifier.crishim.io/web.reload":     `{"signal":"SIGHUP"}`,
		"notifier.crishim.io/db.quiesce.pre": `{"signal":"SIGUSR1"}`,
		"notifier.crishim.io/.quiesce":       `{"signal":"SIGHUP"}`,
		"notifier.crishim.io/noname":         `{"signal":"SIGHUP"}`,
		"other.io/db.quiesce":                `{"exec":["sync"]}`,
	}
	got := map[string]bool{} // container -> valid
	for _, d := range declarations(annotations, "quiesce") {
		got[d.container] = d.err == nil
		if d.err != nil && !strings.Contains(d.err.Error(), d.key) {
			t.Errorf("error %q does not name the annotation %s", d.err, d.key)
		}
	}
	if len(got) != 2 || !got["db"] || got["web"] {
		t.Errorf("declarations of quiesce: %v; want db valid, web malformed", got)
	}
	if d := declarations(annotations, "quiesce.pre"); len(d) != 1 || d[0].container != "db" || d[0].notifier.signal.name != "SIGUSR1" {
		t.Errorf("declarations of quiesce.pre: %+v", d)
	}
	if d := declarations(annotations, "nosuch"); len(d) != 0 {
		t.Errorf("declarations of nosuch: %+v", d)
	}
}
