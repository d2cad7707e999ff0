package main

import (
	"testing"
	"time"
)

// One generation per 25 rounds, never fewer than 24 (or than the rounds),
// and the samples cut where interleaved cuts them.
func TestGenerationsGrowWithSamples(t *testing.T) {
	for _, c := range []struct{ n, want int }{{7, 7}, {300, 24}, {750, 30}, {3000, 120}, {6000, 240}} {
		if got := generations(c.n); got != c.want {
			t.Errorf("generations(%d) = %d, want %d", c.n, got, c.want)
		}
		b := generationBounds(c.n)
		if len(b) != c.want || b[len(b)-1] != c.n {
			t.Errorf("generationBounds(%d) has %d generations ending at %d, want %d ending at %d", c.n, len(b), b[len(b)-1], c.want, c.n)
		}
	}
}

// constantGenerations returns n samples cut as interleaved cuts them, every
// sample of generation g at value(g) µs.
func constantGenerations(n int, value func(g int) int) []time.Duration {
	out := make([]time.Duration, 0, n)
	from := 0
	for g, end := range generationBounds(n) {
		for range end - from {
			out = append(out, time.Duration(value(g))*time.Microsecond)
		}
		from = end
	}
	return out
}

// The interval is as wide as the generations' spread makes the p50, not as
// narrow as the count of samples would: a generation is drawn whole.
// Drawn sample by sample, the same data gives an interval a quarter as
// wide (0.10x against 0.44x).
func TestOverPipeIntervalDrawsWholeGenerations(t *testing.T) {
	const n = 3000 // 120 generations of 25
	lat := map[string][]time.Duration{
		"direct":  constantGenerations(n, func(int) int { return 100 }),
		"pipe":    constantGenerations(n, func(int) int { return 150 }),
		"crishim": constantGenerations(n, func(g int) int { return 120 + g }), // p50 near 180: 1.6x
	}
	iv, ok := newResampler(lat, n).overPipeInterval("crishim")
	if !ok {
		t.Fatal("no interval")
	}
	if iv.Lo > 1.6 || iv.Hi < 1.6 {
		t.Errorf("interval %.2f-%.2fx leaves out the run's own 1.6x", iv.Lo, iv.Hi)
	}
	// The p50 of 120 generations drawn with replacement moves by about
	// ±11 generations (±0.22x) at 95%; by samples, about ±2.
	if iv.Hi-iv.Lo < 0.25 {
		t.Errorf("interval %.2f-%.2fx is narrower than the generations' spread allows", iv.Lo, iv.Hi)
	}
}

// Every target is drawn with the same generations: two targets that
// measured the same in every generation differ by exactly nothing in every
// draw.
func TestDiffIntervalDrawsTheSameGenerationsForBoth(t *testing.T) {
	const n = 3000
	same := func(g int) int { return 150 + 7*(g%13) }
	lat := map[string][]time.Duration{
		"direct":   constantGenerations(n, func(int) int { return 100 }),
		"pipe":     constantGenerations(n, func(int) int { return 150 }),
		"crishim":  constantGenerations(n, same),
		"baseline": constantGenerations(n, same),
	}
	iv, ok := newResampler(lat, n).diffInterval("crishim", "baseline")
	if !ok || iv.Lo != 0 || iv.Hi != 0 {
		t.Errorf("crishim - baseline: %+v (ok %v), want exactly 0", iv, ok)
	}
}

// Where the pipe added nothing there is no multiple to bound.
func TestOverPipeIntervalNeedsThePipeToAddSomething(t *testing.T) {
	const n = 300
	lat := map[string][]time.Duration{
		"direct":  constantGenerations(n, func(int) int { return 100 }),
		"pipe":    constantGenerations(n, func(int) int { return 100 }),
		"crishim": constantGenerations(n, func(int) int { return 120 }),
	}
	if iv, ok := newResampler(lat, n).overPipeInterval("crishim"); ok {
		t.Errorf("interval %+v with a pipe that added nothing", iv)
	}
}
