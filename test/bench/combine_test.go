package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Reports written with -o json are read back and combined per workload:
// crishim's added/pipe over the runs (mean, its interval, median, range)
// and the difference from the baseline build.
func TestCombineReadsJSONReports(t *testing.T) {
	ms := func(n, us int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = time.Duration(us) * time.Microsecond
		}
		return out
	}
	dir := t.TempDir()
	var files []string
	// The pipe adds 50 µs in every run; crishim 60, 65 and 80 (1.2x, 1.3x,
	// 1.6x), the baseline 70 in each (1.4x).
	for i, crishim := range []int{160, 165, 180} {
		lat := map[string][]time.Duration{
			"direct": ms(30, 100), "pipe": ms(30, 150), "crishim": ms(30, crishim),
			"crishim-grpc": ms(30, 300), "naive": ms(30, 300), "baseline": ms(30, 170),
		}
		var r report
		r.addLatency("containerd", "Version", lat, nil, 30)
		f := filepath.Join(dir, strings.Repeat("r", i+1)+".json")
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
	var b strings.Builder
	if err := runCombine(&b, files); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Version", " 3 ",
		"1.367x", "1.300x", // mean, median
		"1.20-1.60x",           // range; the mean's interval lies within
		"1.400x", "1.40-1.40x", // the baseline, the same in every run
		"-1.7µs", // crishim - baseline: -10, -5 and +10
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("combined table lacks %q:\n%s", want, b.String())
		}
	}
	reps, err := readReports(files)
	if err != nil {
		t.Fatal(err)
	}
	c := combineReports(reps)
	if len(c) != 1 {
		t.Fatalf("%d workloads, want 1", len(c))
	}
	s := c[0].OverPipe["crishim"]
	if s.Runs != 3 || s.Min != 1.2 || s.Max != 1.6 || s.MeanCI.Lo < 1.2 || s.MeanCI.Hi > 1.6 || s.MeanCI.Lo >= s.MeanCI.Hi {
		t.Errorf("crishim over the runs: %+v", s)
	}
}
