package main

import (
	"strings"
	"testing"
	"time"
)

// The build comparison is printed when a --baseline ran, from the
// baseline's own samples, and not otherwise.
func TestBaselineTableOnlyWithABaseline(t *testing.T) {
	ms := func(us ...int) []time.Duration {
		var out []time.Duration
		for _, u := range us {
			out = append(out, time.Duration(u)*time.Microsecond)
		}
		return out
	}
	lat := map[string][]time.Duration{
		"direct": ms(100, 100, 100), "pipe": ms(150, 150, 150), "crishim": ms(170, 170, 170),
		"crishim-grpc": ms(300, 300, 300), "naive": ms(300, 300, 300),
	}
	var without report
	without.addLatency("fake", "Version", lat, nil, 3)
	var b strings.Builder
	if err := without.printBaseline(&b); err != nil || b.Len() != 0 {
		t.Fatalf("without a baseline: %q, %v; want nothing", b.String(), err)
	}

	lat["baseline"] = ms(190, 190, 190)
	var with report
	with.addLatency("fake", "Version", lat, nil, 3)
	b.Reset()
	if err := with.printBaseline(&b); err != nil {
		t.Fatal(err)
	}
	// crishim +70 (1.40x the pipe's +50), the baseline +90 (1.80x), 20 µs
	// apart; every sample alike, so every interval is the number itself.
	for _, want := range []string{"+70µs", "1.40x", "1.40-1.40x", "+90µs", "1.80x", "1.80-1.80x", "-20.0µs", "-20.0 to -20.0µs"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
