package shim

import "testing"

// FuzzParseSignal: any string an operator or a pod owner writes parses to
// a Linux signal whose canonical name parses back to it, or is refused.
func FuzzParseSignal(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		sig, err := parseSignal(s)
		if err != nil {
			return
		}
		if sig.num < 1 || sig.num > sigRTMAX || sig.num == 32 || sig.num == 33 {
			t.Fatalf("parseSignal(%q) = %+v: not a signal crishim may send", s, sig)
		}
		again, err := parseSignal(sig.name)
		if err != nil || again != sig {
			t.Fatalf("parseSignal(%q) = %+v, but its name parses to %+v, %v", s, sig, again, err)
		}
	})
}
