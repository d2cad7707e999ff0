package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crishim/crishim/test/node"
)

// minSamples is how many observations a series needs in a turn for that turn's mean to
// count: a mean of one or two calls is those calls.
const minSamples = 5

// figure is one kubelet-side quantity: its mean per turn of each side, in turn order (NaN
// for a turn with too few observations).
type figure struct {
	name            string
	direct, crishim []float64 // seconds
}

func (f figure) ratio() pairedRatio { return ratioOf(f.direct, f.crishim) }

// figures are the kubelet-side means of the turns: pod start-up (the kubelet's SLI), each
// runtime operation the kubelet made, and the PLEG relist.
func figures(turns []turn) []figure {
	var ops []string
	seen := map[string]bool{}
	for _, t := range turns {
		for k := range t.kubelet {
			if op, ok := strings.CutPrefix(k, "op/"); ok && !seen[op] {
				seen[op] = true
				ops = append(ops, op)
			}
		}
	}
	sort.Strings(ops)
	series := []string{seriesPodStart}
	for _, op := range ops {
		series = append(series, "op/"+op)
	}
	series = append(series, seriesPLEG)
	var out []figure
	for _, k := range series {
		f := figure{name: strings.TrimPrefix(k, "op/")}
		for _, t := range turns {
			v := math.NaN()
			if h := t.kubelet[k]; h.count >= minSamples {
				v = h.mean()
			}
			if t.side == sideDirect {
				f.direct = append(f.direct, v)
			} else {
				f.crishim = append(f.crishim, v)
			}
		}
		if f.ratio().pairs > 0 {
			out = append(out, f)
		}
	}
	return out
}

// allResolved is whether every kubelet-side ratio of the turns is within or outside ±2%.
func allResolved(turns []turn) bool {
	for _, f := range figures(turns) {
		if !f.ratio().resolved() {
			return false
		}
	}
	return true
}

func printReport(w io.Writer, o options, n *node.Node, turns []turn, cores int) {
	pairs := len(turns) / 2
	fmt.Fprintf(w, "bench-node: Kubernetes %s, runtime %s, %d pods, %d churns, %d pairs of turns (direct, crishim, direct, ...)\n",
		n.Version, n.Runtime, o.pods, o.churns, pairs)
	fmt.Fprintf(w, "kubelet-side means from its histograms' _sum/_count per turn; ratio = geometric mean over the pairs, %.0f%% Student t interval on the log ratios\n\n", 100*confidence)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "kubelet side (mean)\tdirect\tcrishim\tpairs\tcrishim/direct\tinterval\tverdict")
	worst, worstName := math.Inf(-1), ""
	for _, f := range figures(turns) {
		r := f.ratio()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.4f\t%s\t%s\n", f.name, seconds(median(f.direct)), seconds(median(f.crishim)), r.pairs, r.ratio, interval(r), r.verdict())
		if !math.IsNaN(r.ratio) && r.ratio > worst {
			worst, worstName = r.ratio, f.name
		}
	}
	_ = tw.Flush()

	loads := make([]float64, 0, len(turns))
	for _, t := range turns {
		loads = append(loads, t.load)
	}
	fmt.Fprintf(w, "\nload average (1 min) at the turns' ends: %.2f..%.2f, %d cores\n", slices.Min(loads), slices.Max(loads), cores)
	if slices.Max(loads) > float64(cores) {
		fmt.Fprintf(w, "warning: the load exceeded the cores: processes queued for a CPU and the ratios measure that wait too; lower --pods or quiet the machine\n")
	}

	var cpu, rss, cpDirect, cpCrishim, idleCPU []float64
	var mem []crishimMemory
	for _, t := range turns {
		if t.side == sideCrishim {
			cpu, rss, cpCrishim = append(cpu, t.cpuPct), append(rss, float64(t.rss)), append(cpCrishim, t.cpBps)
			mem = append(mem, t.mem)
		} else {
			idleCPU, cpDirect = append(idleCPU, t.cpuPct), append(cpDirect, t.cpBps)
		}
	}
	fmt.Fprintf(w, "\ncrishim at steady state, %d pods: CPU %.2f%% of a core (goal <= 1%%; %.2f%% while the kubelet went direct), RSS %.1f MiB (goal <= 40 MiB at 110 pods)\n",
		o.pods, median(cpu), median(idleCPU), median(rss)/(1<<20))
	if len(mem) > 0 {
		fmt.Fprintf(w, "crishim's memory, last crishim turn: %s\n", mem[len(mem)-1])
	}
	if o.cpBytes > 0 {
		fmt.Fprintf(w, "kubectl cp of %d MiB: direct %.1f MiB/s, crishim %.1f MiB/s, crishim/direct %.3f (goal >= 0.95)\n",
			max(o.cpBytes>>20, 1), median(cpDirect)/(1<<20), median(cpCrishim)/(1<<20), median(cpCrishim)/median(cpDirect))
	}
	fmt.Fprintf(w, "goal: every kubelet-side ratio within 1 ± %.0f%%; the largest is %s\n", 100*tolerance, worstName)
	// The last line, which scripts read.
	fmt.Fprintf(w, "worst kubelet-side ratio crishim/direct = %.3f\n", worst)
}

func interval(r pairedRatio) string {
	if math.IsNaN(r.lo) {
		return "-"
	}
	return fmt.Sprintf("%.4f..%.4f", r.lo, r.hi)
}

// median of the values that are not NaN; NaN when none is.
func median(v []float64) float64 {
	s := slices.DeleteFunc(slices.Clone(v), math.IsNaN)
	if len(s) == 0 {
		return math.NaN()
	}
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func seconds(s float64) string {
	if math.IsNaN(s) {
		return "-"
	}
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond).String()
}
