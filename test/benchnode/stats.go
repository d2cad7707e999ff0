package main

import (
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"
)

// tolerance is the goal for every kubelet-side ratio: crishim/direct within 1 ± 2%.
const tolerance = 0.02

// confidence is the two-sided level of the intervals.
const confidence = 0.95

// pairedRatio is a ratio crishim/direct estimated from paired turns (each crishim turn
// against the direct turn just before it): the geometric mean of the pairs' ratios and a
// Student t interval on the mean of their logarithms. Logarithms because a ratio is
// multiplicative (1/2 and 2 are equally far from 1) and the t interval because the pairs
// are few and their log ratios close to normal when each turn's mean averages many calls.
type pairedRatio struct {
	pairs  int
	ratio  float64 // exp(mean log ratio); NaN without pairs
	lo, hi float64 // the interval; NaN with fewer than 2 pairs
}

// ratioOf estimates crishim/direct from the pairs (direct[i], crishim[i]). A pair with a
// value that is not positive and finite (an operation the turn did not make) is left out.
func ratioOf(direct, crishim []float64) pairedRatio {
	var logs []float64
	for i := range min(len(direct), len(crishim)) {
		d, c := direct[i], crishim[i]
		if !(d > 0 && c > 0) || math.IsInf(d, 0) || math.IsInf(c, 0) {
			continue
		}
		logs = append(logs, math.Log(c/d))
	}
	r := pairedRatio{pairs: len(logs), ratio: math.NaN(), lo: math.NaN(), hi: math.NaN()}
	if len(logs) == 0 {
		return r
	}
	var mean float64
	for _, l := range logs {
		mean += l
	}
	mean /= float64(len(logs))
	r.ratio = math.Exp(mean)
	if len(logs) < 2 {
		return r
	}
	var ss float64
	for _, l := range logs {
		ss += (l - mean) * (l - mean)
	}
	n := float64(len(logs))
	se := math.Sqrt(ss / (n - 1) / n)
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: n - 1}.Quantile(1 - (1-confidence)/2)
	r.lo, r.hi = math.Exp(mean-t*se), math.Exp(mean+t*se)
	return r
}

// verdict says where the interval lies against 1 ± tolerance: "within" when all of it is
// inside, "outside (slower)" or "outside (faster)" when all of it is beyond one side, and
// otherwise not resolved: more turns would narrow it.
func (r pairedRatio) verdict() string {
	switch {
	case math.IsNaN(r.lo) || math.IsNaN(r.hi):
		return fmt.Sprintf("not resolved with %d pairs of turns", r.pairs)
	case r.lo >= 1-tolerance && r.hi <= 1+tolerance:
		return "within ±2%"
	case r.lo > 1+tolerance:
		return "outside ±2% (crishim slower)"
	case r.hi < 1-tolerance:
		return "outside ±2% (crishim faster)"
	default:
		return fmt.Sprintf("not resolved with %d pairs of turns", r.pairs)
	}
}

// resolved is whether the verdict is within or outside.
func (r pairedRatio) resolved() bool { return !strings.HasPrefix(r.verdict(), "not resolved") }
