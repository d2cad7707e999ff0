package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// The micro guard (`make bench-guard`, never `make test`: timings are not
// for tests): over several runs' output, crishim's added latency on the
// small calls is at most guardPipe times the pipe's and at most
// 1/guardNaive of the naive forwarder's, medians over the runs.
const (
	guardPipe  = 1.4
	guardNaive = 2.0
)

// guardedWorkloads are the small calls, where the hop is all there is.
var guardedWorkloads = []string{"Version", "ContainerStatus"}

// readAdded collects, from Go benchmark format, every run's added-ns/op by
// benchmark name ("Version/backend=fake/target=crishim").
func readAdded(r io.Reader) (map[string][]float64, error) {
	out := map[string][]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text()) // BenchmarkNAME N VALUE UNIT ...
		i := slices.Index(f, "added-ns/op")
		if i < 3 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		v, err := strconv.ParseFloat(f[i-1], 64)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", sc.Text(), err)
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		out[name] = append(out[name], v)
	}
	return out, sc.Err()
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// guard prints each guarded call's medians and verdict to w and returns
// an error naming every call over the line, or none measured.
func guard(w io.Writer, added map[string][]float64) error {
	var failed []string
	checked := 0
	for _, backend := range []string{"fake", "containerd"} {
		for _, wl := range guardedWorkloads {
			of := func(target string) []float64 { return added[benchName(wl, backend, target)] }
			crishim, pipe, naive := of("crishim"), of("pipe"), of("naive")
			if len(crishim) == 0 || len(pipe) == 0 || len(naive) == 0 {
				continue
			}
			checked++
			c, p, n := median(crishim), median(pipe), median(naive)
			ok := c <= guardPipe*p && guardNaive*c <= n
			verdict := "ok"
			if !ok {
				verdict = "OVER"
				failed = append(failed, wl+"/"+backend)
			}
			fmt.Fprintf(w, "%s/%s: crishim adds %.1f µs, %.2fx the pipe's %.1f (≤ %.1fx), naive %.1f µs = %.2fx crishim's (≥ %.1fx), medians of %d runs: %s\n",
				wl, backend, c/1e3, c/p, p/1e3, guardPipe, n/1e3, n/c, guardNaive, len(crishim), verdict)
		}
	}
	if checked == 0 {
		return fmt.Errorf("no runs with crishim, pipe and naive for %s (run the bench with --naive)", strings.Join(guardedWorkloads, ", "))
	}
	if len(failed) > 0 {
		return fmt.Errorf("over the line: %s", strings.Join(failed, ", "))
	}
	return nil
}
