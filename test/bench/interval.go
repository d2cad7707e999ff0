package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// A run's p50s are not exact: each connection generation carries a cost of
// its own (two crishims of one binary, one run: per-generation p50s spread
// by about 11 µs for every target, direct included), and a p50 of a few
// thousand calls moves with the calls it happened to get. So the bench
// gives the two numbers issue 15 is judged by, crishim's added latency
// over the pipe's and the difference from a --baseline build, with a 95%
// interval: the numbers computed again on the run's generations drawn
// with replacement (a bootstrap over generations, the unit that is
// independent), so that one run says how far it can be trusted.
// What it cannot show is what changes from one run to the next (new
// processes, a new containerd): compare runs for that.

// bootstrapReps is how many resamples an interval takes: enough for its
// 2.5th and 97.5th percentiles to move by less than the last digit printed.
const bootstrapReps = 400

// interval is a statistic's 95% interval from the bootstrap.
type interval struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

// multiples prints an interval of multiples of the pipe's added latency.
func (iv interval) multiples() string { return fmt.Sprintf("%.2f-%.2fx", iv.Lo, iv.Hi) }

// micros prints an interval of differences in µs.
func (iv interval) micros() string { return fmt.Sprintf("%+.1f to %+.1fµs", iv.Lo, iv.Hi) }

// generationBounds are the ends of the generations in n rounds, and so in
// a target's samples, one per round: interleaved runs generation g's
// rounds from n*g/gens up to n*(g+1)/gens.
func generationBounds(n int) []int {
	gens := generations(n)
	out := make([]int, gens)
	for g := range gens {
		out[g] = n * (g + 1) / gens
	}
	return out
}

// resampler draws whole generations with replacement, the same draw for
// every target, so that what a generation did to all of them stays
// together.
type resampler struct {
	lat    map[string][]time.Duration
	bounds []int
	rng    *rand.Rand
	picks  []int
	buf    []time.Duration
}

func newResampler(lat map[string][]time.Duration, n int) *resampler {
	return &resampler{lat: lat, bounds: generationBounds(n), rng: rand.New(rand.NewPCG(3, 4))}
}

// draw picks the next resample's generations.
func (r *resampler) draw() {
	r.picks = r.picks[:0]
	for range r.bounds {
		r.picks = append(r.picks, r.rng.IntN(len(r.bounds)))
	}
}

// p50 is name's p50 over the drawn generations, in µs.
func (r *resampler) p50(name string) float64 {
	ds := r.lat[name]
	r.buf = r.buf[:0]
	for _, g := range r.picks {
		from := 0
		if g > 0 {
			from = r.bounds[g-1]
		}
		r.buf = append(r.buf, ds[from:r.bounds[g]]...)
	}
	slices.Sort(r.buf)
	return us(quantile(r.buf, 0.5))
}

// interval computes stat on bootstrapReps resamples and returns the middle
// 95% of what it gave; stat returns false where it has no value (the pipe
// added nothing), and such draws are left out. ok is false when fewer
// than nine in ten draws had a value.
func (r *resampler) interval(stat func() (float64, bool)) (iv interval, ok bool) {
	vals := make([]float64, 0, bootstrapReps)
	for range bootstrapReps {
		r.draw()
		if v, ok := stat(); ok {
			vals = append(vals, v)
		}
	}
	if len(vals) < bootstrapReps*9/10 {
		return interval{}, false
	}
	return middle95(vals), true
}

// middle95 is the interval that holds the middle 95% of vals, which it
// sorts.
func middle95(vals []float64) interval {
	slices.Sort(vals)
	return interval{Lo: quantile(vals, 0.025), Hi: quantile(vals, 0.975)}
}

// overPipeInterval is the 95% interval of name's added p50 over the pipe's.
func (r *resampler) overPipeInterval(name string) (interval, bool) {
	return r.interval(func() (float64, bool) {
		direct := r.p50("direct")
		m := overPipe(r.p50(name)-direct, r.p50("pipe")-direct)
		if m == nil {
			return 0, false
		}
		return *m, true
	})
}

// diffInterval is the 95% interval of a's p50 minus b's, in µs.
func (r *resampler) diffInterval(a, b string) (interval, bool) {
	return r.interval(func() (float64, bool) { return r.p50(a) - r.p50(b), true })
}
