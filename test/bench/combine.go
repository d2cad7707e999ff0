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
// reports of several runs (-o json) and prints, per workload, crishim's
// added/pipe and, with a --baseline, the difference of the two builds:
// mean over the runs with the 95% interval of that mean (a bootstrap over
// runs), median and range.

// spread summarizes one number over runs.
type spread struct {
	Runs     int      `json:"runs"`
	Mean     float64  `json:"mean"`
	MeanCI   interval `json:"mean_95"`
	Median   float64  `json:"median"`
	Min, Max float64
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
	slices.Sort(means)
	out.MeanCI = interval{Lo: means[int(0.025*float64(len(means)-1))], Hi: means[int(0.975*float64(len(means)-1))]}
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
	OverPipe          map[string]spread // "crishim", "baseline"
	BaselineDiff      *spread           // crishim p50 - baseline p50, µs
}

// combineReports gathers the reports' latency rows by backend and
// workload, in the order they first appear.
func combineReports(reps []report) []combined {
	type key struct{ backend, workload string }
	var order []key
	overPipe := map[key]map[string][]float64{}
	diffs := map[key][]float64{}
	for _, r := range reps {
		for _, l := range r.Latency {
			k := key{l.Backend, l.Workload}
			if overPipe[k] == nil {
				order = append(order, k)
				overPipe[k] = map[string][]float64{}
			}
			for _, name := range []string{"crishim", "baseline"} {
				if m := l.OverPipeP50[name]; m != nil {
					overPipe[k][name] = append(overPipe[k][name], *m)
				}
			}
			if b, ok := l.P50["baseline"]; ok {
				diffs[k] = append(diffs[k], l.P50["crishim"]-b)
			}
		}
	}
	var out []combined
	for _, k := range order {
		c := combined{Backend: k.backend, Workload: k.workload, OverPipe: map[string]spread{}}
		for name, vals := range overPipe[k] {
			c.OverPipe[name] = summarize(vals)
		}
		if d := diffs[k]; len(d) > 0 {
			s := summarize(d)
			c.BaselineDiff = &s
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
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "backend\tworkload\truns\tcrishim added/pipe: mean\t95% of mean\tmedian\trange\tbaseline: mean\t95% of mean\tcrishim - baseline: mean\t95% of mean\t")
	for _, c := range combineReports(reps) {
		cr, ok := c.OverPipe["crishim"]
		if !ok {
			continue
		}
		base, diff, diffCI := "-", "-", "-"
		baseCI := "-"
		if b, ok := c.OverPipe["baseline"]; ok {
			base, baseCI = fmt.Sprintf("%.3fx", b.Mean), fmt.Sprintf("%.2f-%.2fx", b.MeanCI.Lo, b.MeanCI.Hi)
		}
		if d := c.BaselineDiff; d != nil {
			diff, diffCI = fmt.Sprintf("%+.1fµs", d.Mean), fmt.Sprintf("%+.1f to %+.1fµs", d.MeanCI.Lo, d.MeanCI.Hi)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.3fx\t%.2f-%.2fx\t%.3fx\t%.2f-%.2fx\t%s\t%s\t%s\t%s\t\n", c.Backend, c.Workload, cr.Runs,
			cr.Mean, cr.MeanCI.Lo, cr.MeanCI.Hi, cr.Median, cr.Min, cr.Max, base, baseCI, diff, diffCI)
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
