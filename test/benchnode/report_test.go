package main

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/crishim/crishim/test/node"
)

// kubeletText is a piece of a kubelet's /metrics: the means come from _sum and _count,
// whatever the buckets say.
const kubeletText = `# TYPE kubelet_runtime_operations_duration_seconds histogram
kubelet_runtime_operations_duration_seconds_bucket{operation_type="list_containers",le="0.005"} 90
kubelet_runtime_operations_duration_seconds_bucket{operation_type="list_containers",le="+Inf"} 100
kubelet_runtime_operations_duration_seconds_sum{operation_type="list_containers"} 0.35
kubelet_runtime_operations_duration_seconds_count{operation_type="list_containers"} 100
kubelet_runtime_operations_duration_seconds_bucket{operation_type="version",le="0.005"} 4
kubelet_runtime_operations_duration_seconds_bucket{operation_type="version",le="+Inf"} 4
kubelet_runtime_operations_duration_seconds_sum{operation_type="version"} 0.002
kubelet_runtime_operations_duration_seconds_count{operation_type="version"} 4
# TYPE kubelet_pod_start_sli_duration_seconds histogram
kubelet_pod_start_sli_duration_seconds_bucket{le="+Inf"} 12
kubelet_pod_start_sli_duration_seconds_sum 18
kubelet_pod_start_sli_duration_seconds_count 12
# TYPE kubelet_pleg_relist_duration_seconds histogram
kubelet_pleg_relist_duration_seconds_bucket{le="+Inf"} 30
kubelet_pleg_relist_duration_seconds_sum 0.3
kubelet_pleg_relist_duration_seconds_count 30
`

func TestParseKubeletGivesExactMeans(t *testing.T) {
	s, err := parseKubelet(kubeletText)
	if err != nil {
		t.Fatal(err)
	}
	for series, want := range map[string]float64{
		"op/list_containers": 0.0035, // a quantile of these buckets could say no better than "under 5 ms"
		"op/version":         0.0005,
		seriesPodStart:       1.5,
		seriesPLEG:           0.01,
	} {
		if got := s[series].mean(); math.Abs(got-want) > 1e-12 {
			t.Errorf("%s mean = %v, want %v (%+v)", series, got, want, s[series])
		}
	}
}

func TestSinceCountsTheTurnOnly(t *testing.T) {
	before := scrape{"op/a": {sum: 6, count: 6}}
	after := scrape{"op/a": {sum: 14, count: 10}, "op/b": {sum: 1, count: 1}}
	d := after.since(before)
	if a := d["op/a"]; a.count != 4 || a.sum != 8 {
		t.Errorf("op/a over the turn: %+v, want 8 s over 4", a)
	}
	if b := d["op/b"]; b.count != 1 {
		t.Errorf("op/b, new in the turn: %+v, want all of it", b)
	}
	// A kubelet restarted in between starts from zero: its counts are the turn's.
	restarted := scrape{"op/a": {sum: 3, count: 2}}
	if a := restarted.since(before)["op/a"]; a.count != 2 || a.sum != 3 {
		t.Errorf("after a restart: %+v, want the counts as they are", a)
	}
}

// TestRatioOfPairs: the geometric mean of the pairs' ratios and the 95% t interval on their
// logarithms, against values worked out by hand (t(0.975, 3 df) = 3.1824).
func TestRatioOfPairs(t *testing.T) {
	r := ratioOf([]float64{0.010, 0.012, 0.011, 0.010}, []float64{0.0101, 0.0123, 0.0111, 0.0102})
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"ratio", r.ratio, 1.0160005}, {"lo", r.lo, 1.0037325}, {"hi", r.hi, 1.0284185}} {
		if math.Abs(c.got-c.want) > 1e-6 {
			t.Errorf("%s = %.7f, want %.7f", c.name, c.got, c.want)
		}
	}
	if r.pairs != 4 {
		t.Errorf("pairs = %d, want 4", r.pairs)
	}
	// A turn without the operation leaves its pair out.
	if r := ratioOf([]float64{1, math.NaN(), 1}, []float64{2, 1, 2}); r.pairs != 2 || math.Abs(r.ratio-2) > 1e-12 {
		t.Errorf("with a missing turn: %+v, want 2 pairs, ratio 2", r)
	}
}

func TestVerdictAgainstTwoPercent(t *testing.T) {
	d := []float64{0.010, 0.012, 0.011, 0.010}
	scaled := func(f ...float64) []float64 {
		out := make([]float64, len(d))
		for i := range d {
			out[i] = d[i] * f[i]
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		crishim []float64
		want    string
	}{
		{"within", scaled(1.005, 1.01, 1.0, 1.005), "within ±2%"},
		{"slower", scaled(1.10, 1.12, 1.11, 1.09), "outside ±2% (crishim slower)"},
		{"faster", scaled(0.90, 0.92, 0.91, 0.89), "outside ±2% (crishim faster)"},
		{"straddles 1.02", []float64{0.0101, 0.0123, 0.0111, 0.0102}, "not resolved with 4 pairs of turns"},
		{"one pair", scaled(1.5, math.NaN(), math.NaN(), math.NaN()), "not resolved with 1 pairs of turns"},
	} {
		r := ratioOf(d, tc.crishim)
		if got := r.verdict(); got != tc.want {
			t.Errorf("%s: verdict %q, want %q (%+v)", tc.name, got, tc.want, r)
		}
		if resolved := !strings.HasPrefix(tc.want, "not"); r.resolved() != resolved {
			t.Errorf("%s: resolved() = %v, want %v", tc.name, r.resolved(), resolved)
		}
	}
}

// TestReportEndsWithTheWorstRatio: the verdict table comes before the last line, the one
// scripts read, which names the largest kubelet-side ratio; a series with too few calls in
// a turn is left out of that turn.
func TestReportEndsWithTheWorstRatio(t *testing.T) {
	turn1 := func(side string, list, rare float64) turn {
		return turn{side: side, load: 0.5, kubelet: scrape{
			"op/list_containers": {sum: 100 * list, count: 100},
			"op/rare":            {sum: 2 * rare, count: 2},
			seriesPodStart:       {sum: 12, count: 12},
		}, cpBps: 100}
	}
	turns := []turn{
		turn1(sideDirect, 0.010, 0.01), turn1(sideCrishim, 0.0125, 1),
		turn1(sideDirect, 0.010, 0.01), turn1(sideCrishim, 0.0125, 1),
	}
	var out bytes.Buffer
	printReport(&out, options{pods: 1, turns: 2, cpBytes: 1 << 20}, &node.Node{}, turns, 2)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; last != "worst kubelet-side ratio crishim/direct = 1.250" {
		t.Errorf("last line %q, want list_containers's 1.250 (rare has too few calls)\n%s", last, out.String())
	}
	if strings.Contains(out.String(), "rare") {
		t.Errorf("an operation with 2 calls a turn is compared:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "outside ±2% (crishim slower)") {
		t.Errorf("no verdict for list_containers at 1.25 in every pair:\n%s", out.String())
	}
	if strings.Contains(out.String(), "warning") {
		t.Errorf("a warning at load 0.5 on 2 cores:\n%s", out.String())
	}
}
