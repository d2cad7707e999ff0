package shim

import (
	"testing"
	"time"
)

// FuzzParseNotifier: a pod owner writes the annotation; whatever it holds,
// parsing never panics, and what it accepts is a notifier crishim can run.
func FuzzParseNotifier(f *testing.F) {
	f.Fuzz(func(t *testing.T, value string) {
		n, err := parseNotifier(value)
		if err != nil {
			return
		}
		if (len(n.exec) > 0) == (n.signal.num != 0) {
			t.Fatalf("parseNotifier(%q) = %+v: want exactly one action", value, n)
		}
		if n.timeout < time.Second || n.timeout > maxNotifierTimeoutSeconds*time.Second {
			t.Fatalf("parseNotifier(%q): timeout %s out of range", value, n.timeout)
		}
		if n.signal.num != 0 {
			if _, ok := signalByNumber(n.signal.num); !ok {
				t.Fatalf("parseNotifier(%q): signal %+v is not a Linux signal", value, n.signal)
			}
		}
	})
}
