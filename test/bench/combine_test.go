package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// oneRun is a run's Version p50s (µs) for crishim and the baseline, with
// direct at 100 and the pipe at 150, and the builds each slot ran.
type oneRun struct {
	crishim, baseline int
	builds            map[string]string
}

// writeReports writes each run's report with -o json, as the bench does.
func writeReports(t *testing.T, runs []oneRun) []string {
	t.Helper()
	same := func(us int) []time.Duration { return constantGenerations(30, func(int) int { return us }) }
	dir := t.TempDir()
	var files []string
	for i, run := range runs {
		lat := map[string][]time.Duration{
			"direct": same(100), "pipe": same(150), "crishim": same(run.crishim),
			"crishim-grpc": same(300), "naive": same(300), "baseline": same(run.baseline),
		}
		r := report{Builds: run.builds}
		r.addLatency("containerd", "Version", lat, nil, 30)
		f := filepath.Join(dir, fmt.Sprintf("run-%d.json", i))
		out, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.print(out, "json"); err != nil {
			t.Fatal(err)
		}
		_ = out.Close()
		files = append(files, f)
	}
	return files
}

func combinedTable(t *testing.T, files []string) string {
	t.Helper()
	var b strings.Builder
	if err := runCombine(&b, files); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Reports written with -o json are read back and combined per workload:
// added/pipe over the runs (mean, its interval, median, range) and the
// difference of the two slots when the reports do not name their builds.
func TestCombineReadsJSONReports(t *testing.T) {
	// crishim adds 60, 65 and 80 µs (1.2x, 1.3x, 1.6x the pipe's 50),
	// the baseline 70 in each (1.4x).
	files := writeReports(t, []oneRun{{160, 170, nil}, {165, 170, nil}, {180, 170, nil}})
	table := combinedTable(t, files)
	for _, want := range []string{
		"A: the crishim slot", "B: the baseline slot", "Version", " 3 ",
		"1.367x", "1.300x", // mean, median
		"1.20-1.60x",           // range; the mean's interval lies within
		"1.400x", "1.40-1.40x", // the baseline, the same in every run
		"-1.7µs", // crishim - baseline: -10, -5 and +10
	} {
		if !strings.Contains(table, want) {
			t.Errorf("combined table lacks %q:\n%s", want, table)
		}
	}
	reps, err := readReports(files)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := orient(reps)
	if err != nil {
		t.Fatal(err)
	}
	c := combineReports(reps, bs)
	if len(c) != 1 {
		t.Fatalf("%d workloads, want 1", len(c))
	}
	s := c[0].OverPipe["A"]
	if s.Runs != 3 || s.Min != 1.2 || s.Max != 1.6 || s.MeanCI.Lo < 1.2 || s.MeanCI.Hi > 1.6 || s.MeanCI.Lo >= s.MeanCI.Hi {
		t.Errorf("crishim over the runs: %+v", s)
	}
}

// With the two builds in alternating slots, each build's numbers are
// gathered from whichever slot it ran in, and the difference is always
// the first report's crishim build minus the other.
func TestCombineFollowsBuildsAcrossSlots(t *testing.T) {
	ab := map[string]string{"crishim": "new", "baseline": "old"}
	ba := map[string]string{"crishim": "old", "baseline": "new"}
	// new adds 60 µs in every run (1.2x), old 70 (1.4x), whatever the slot.
	files := writeReports(t, []oneRun{{160, 170, ab}, {170, 160, ba}, {160, 170, ab}, {170, 160, ba}})
	table := combinedTable(t, files)
	for _, want := range []string{"A: new", "B: old", " 4 ", "1.20-1.20x", "1.400x", "-10.0µs", "-10.0 to -10.0µs"} {
		if !strings.Contains(table, want) {
			t.Errorf("combined table lacks %q:\n%s", want, table)
		}
	}
	other := writeReports(t, []oneRun{{160, 170, ab}, {160, 170, map[string]string{"crishim": "new", "baseline": "third"}}})
	if err := runCombine(&strings.Builder{}, other); err == nil {
		t.Error("reports of three builds combined without an error")
	}
}
