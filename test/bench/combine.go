package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"text/tabwriter"
)

// A run's interval (interval.go) covers what its connections did, not
// what a new set of processes does in the next run; a number as close to
// a target as issue 15's is judged over runs. --combine reads the JSON
// reports of several runs (-o json) and prints, per workload, each build's
// added/pipe and, with a --baseline, the difference of the two builds,
// build by build whatever slot each ran in (builds.go): mean over the
// runs with the 95% interval of that mean (a bootstrap over runs), median
// and range. Alternating the slots between runs cancels what a slot
// itself costs: over sixteen runs with one binary in both slots, the
// crishim slot was the slower by +0.6 to +3.4 µs on average, workload by
// workload (docs/performance.md, sixth pass).

// spread summarizes one number over runs.
type spread struct {
	Runs         int
	Mean, Median float64
	MeanCI       interval
	Min, Max     float64
}

// summarize needs at least one value.
func summarize(vals []float64) spread {
	s := slices.Clone(vals)
	slices.Sort(s)
	out := spread{Runs: len(s), Mean: mean(s), Median: median(s), Min: s[0], Max: s[len(s)-1]}
	rng := rand.New(rand.NewPCG(5, 6))
	means := make([]float64, bootstrapReps)
	draw := make([]float64, len(s))
	for i := range means {
		for j := range draw {
			draw[j] = s[rng.IntN(len(s))]
		}
		means[i] = mean(draw)
	}
	out.MeanCI = middle95(means)
	return out
}

func mean(vs []float64) float64 {
	var sum float64
	for _, v := range vs {
		sum += v
	}
	return sum / float64(len(vs))
}

// combined is one workload over the runs that measured it.
type combined struct {
	Backend, Workload string
	OverPipe          map[string]spread // build "A" and build "B"
	Diff              *spread           // A's p50 - B's, µs
}

// combineReports gathers the reports' latency rows by backend and
// workload, in the order they first appear, build by build (orient).
func combineReports(reps []report, bs builds) []combined {
	type key struct{ backend, workload string }
	var order []key
	overPipe := map[key]map[string][]float64{}
	diffs := map[key][]float64{}
	for i, r := range reps {
		slots := map[string]string{"A": bs.slotOfA[i], "B": otherSlot(bs.slotOfA[i])}
		for _, l := range r.Latency {
			k := key{l.Backend, l.Workload}
			if overPipe[k] == nil {
				order = append(order, k)
				overPipe[k] = map[string][]float64{}
			}
			for side, slot := range slots {
				if m := l.OverPipeP50[slot]; m != nil {
					overPipe[k][side] = append(overPipe[k][side], *m)
				}
			}
			a, okA := l.P50[slots["A"]]
			b, okB := l.P50[slots["B"]]
			if okA && okB {
				diffs[k] = append(diffs[k], a-b)
			}
		}
	}
	var out []combined
	for _, k := range order {
		c := combined{Backend: k.backend, Workload: k.workload, OverPipe: map[string]spread{}}
		for side, vals := range overPipe[k] {
			c.OverPipe[side] = summarize(vals)
		}
		if d := diffs[k]; len(d) > 0 {
			s := summarize(d)
			c.Diff = &s
		}
		out = append(out, c)
	}
	return out
}

// runCombine reads the JSON reports in files and prints them combined.
func runCombine(w io.Writer, files []string) error {
	if len(files) == 0 {
		return fmt.Errorf("name the JSON reports (-o json) to combine")
	}
	reps, err := readReports(files)
	if err != nil {
		return err
	}
	bs, err := orient(reps)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "A: %s\nB: %s\n\n", bs.a, bs.b)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "backend\tworkload\truns\tA added/pipe: mean\t95% of mean\tmedian\trange\tB: mean\t95% of mean\tA - B: mean\t95% of mean\t")
	for _, c := range combineReports(reps, bs) {
		a, ok := c.OverPipe["A"]
		if !ok {
			continue
		}
		b, bCI, diff, diffCI := "-", "-", "-", "-"
		if s, ok := c.OverPipe["B"]; ok {
			b, bCI = fmt.Sprintf("%.3fx", s.Mean), s.MeanCI.multiples()
		}
		if d := c.Diff; d != nil {
			diff, diffCI = fmt.Sprintf("%+.1fµs", d.Mean), d.MeanCI.micros()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.3fx\t%s\t%.3fx\t%s\t%s\t%s\t%s\t%s\t\n", c.Backend, c.Workload, a.Runs,
			a.Mean, a.MeanCI.multiples(), a.Median, interval{Lo: a.Min, Hi: a.Max}.multiples(), b, bCI, diff, diffCI)
	}
	return tw.Flush()
}

// readReports reads reports the bench wrote with -o json.
func readReports(files []string) ([]report, error) {
	var reps []report
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		reps = append(reps, r)
	}
	return reps, nil
}
