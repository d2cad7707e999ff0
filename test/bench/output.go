package main

import (
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// The bench prints Go benchmark format
// (https://go.googlesource.com/proposal/+/master/design/14313-benchmark-data.md),
// one line per target per benchmark per run, so that benchstat gives the
// medians, intervals and A/B deltas over runs: `make bench > a.txt`, N
// times, then `benchstat -col /target a.txt`.

// metric is one value-unit pair of a result line.
type metric struct {
	value float64
	unit  string
}

// result is one line: BenchmarkNAME N VALUE UNIT ...
type result struct {
	name    string // after "Benchmark": Version/backend=fake/target=crishim
	n       int
	metrics []metric
}

func (r result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Benchmark%s\t%d", r.name, r.n)
	for _, m := range r.metrics {
		fmt.Fprintf(&b, "\t%s %s", strconv.FormatFloat(m.value, 'f', -1, 64), m.unit)
	}
	return b.String()
}

// printHeader prints the configuration lines benchstat reads. Nothing that
// changes from run to run goes here: benchstat puts results with different
// configurations in different tables.
func printHeader(w io.Writer) {
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\npkg: github.com/crishim/crishim/test/bench\n", runtime.GOOS, runtime.GOARCH)
	if fs, err := procfs.NewDefaultFS(); err == nil {
		if cpus, err := fs.CPUInfo(); err == nil && len(cpus) > 0 {
			fmt.Fprintf(w, "cpu: %s\n", cpus[0].ModelName)
		}
	}
}

// latencyResults are one workload's lines: per target, its median as ns/op
// (the calls' latencies are skewed, so the median, not Go's mean) and its
// p99, and for every target but direct what it adds to direct's median in
// the same run. targets gives the order; direct must be among them.
func latencyResults(backend, workload string, targets []*target, lat map[string][]time.Duration) []result {
	direct := quantile(lat["direct"], 0.5)
	out := make([]result, 0, len(targets))
	for _, t := range targets {
		name, ds := t.name, lat[t.name]
		p50 := quantile(ds, 0.5)
		ms := []metric{{float64(p50.Nanoseconds()), "ns/op"}, {float64(quantile(ds, 0.99).Nanoseconds()), "p99-ns"}}
		if name != "direct" {
			ms = append(ms, metric{float64((p50 - direct).Nanoseconds()), "added-ns/op"})
		}
		out = append(out, result{name: benchName(workload, backend, name), n: len(ds), metrics: ms})
	}
	return out
}

func benchName(workload, backend, target string) string {
	return fmt.Sprintf("%s/backend=%s/target=%s", workload, backend, target)
}

func mib(bytes int64) float64 {
	return float64(bytes*100>>20) / 100
}
