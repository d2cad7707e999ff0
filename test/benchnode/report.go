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

// minSamples is how many observations an operation needs in every turn for its quantiles to
// be compared: a p99 of a handful of calls is one call.
const minSamples = 20

// figure is one kubelet-side quantity, per turn of each side.
type figure struct {
	name            string
	direct, crishim []float64 // seconds, in turn order
}

func (f figure) ratio() float64 { return median(f.crishim) / median(f.direct) }

// spread is the least and greatest ratio of a crishim turn to the direct turn before it.
func (f figure) spread() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for i := range min(len(f.direct), len(f.crishim)) {
		r := f.crishim[i] / f.direct[i]
		lo, hi = math.Min(lo, r), math.Max(hi, r)
	}
	return lo, hi
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func durationsQuantile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return math.NaN()
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)].Seconds()
}

// figures are the kubelet-side quantities of the turns: start-up latency, the runtime
// operations the kubelet made often enough on every turn, and the PLEG relist.
func figures(turns []turn) []figure {
	by := func(name string, val func(turn) float64) figure {
		f := figure{name: name}
		for _, t := range turns {
			if t.side == sideDirect {
				f.direct = append(f.direct, val(t))
			} else {
				f.crishim = append(f.crishim, val(t))
			}
		}
		return f
	}
	out := []figure{
		by("pod start-up p50", func(t turn) float64 { return durationsQuantile(t.startups, 0.5) }),
		by("pod start-up p99", func(t turn) float64 { return durationsQuantile(t.startups, 0.99) }),
	}
	var ops []string
	for k := range turns[0].kubelet {
		if op, ok := strings.CutPrefix(k, "op/"); ok && everyTurnHas(turns, k) {
			ops = append(ops, op)
		}
	}
	sort.Strings(ops)
	for _, op := range ops {
		k := "op/" + op
		out = append(out,
			by(op+" p50", func(t turn) float64 { return t.kubelet[k].quantile(0.5) }),
			by(op+" p99", func(t turn) float64 { return t.kubelet[k].quantile(0.99) }))
	}
	if everyTurnHas(turns, "pleg") {
		out = append(out, by("PLEG relist p99", func(t turn) float64 { return t.kubelet["pleg"].quantile(0.99) }))
	}
	return out
}

func everyTurnHas(turns []turn, series string) bool {
	for _, t := range turns {
		if t.kubelet[series].total < minSamples {
			return false
		}
	}
	return true
}

func printReport(w io.Writer, o options, n *node.Node, turns []turn) {
	fmt.Fprintf(w, "bench-node: Kubernetes %s, runtime %s, %d pods, %d churns, %d turns a side (direct first, alternating)\n\n",
		n.Version, n.Runtime, o.pods, o.churns, o.turns)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kubelet side\tdirect (median)\tcrishim (median)\tcrishim/direct\tspread over pairs\t")
	worst, worstName := math.Inf(-1), ""
	for _, f := range figures(turns) {
		r := f.ratio()
		lo, hi := f.spread()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%.3f..%.3f\t\n", f.name, seconds(median(f.direct)), seconds(median(f.crishim)), r, lo, hi)
		if !math.IsNaN(r) && r > worst {
			worst, worstName = r, f.name
		}
	}
	_ = tw.Flush()

	var cpu, rss, cpDirect, cpCrishim, idleCPU []float64
	for _, t := range turns {
		if t.side == sideCrishim {
			cpu, rss, cpCrishim = append(cpu, t.cpuPct), append(rss, float64(t.rss)), append(cpCrishim, t.cpBps)
		} else {
			idleCPU, cpDirect = append(idleCPU, t.cpuPct), append(cpDirect, t.cpBps)
		}
	}
	fmt.Fprintf(w, "\ncrishim at steady state, %d pods: CPU %.2f%% of a core (goal <= 1%%; %.2f%% while the kubelet went direct), RSS %.1f MiB (goal <= 40 MiB)\n",
		o.pods, median(cpu), median(idleCPU), median(rss)/(1<<20))
	if o.cpBytes > 0 {
		fmt.Fprintf(w, "kubectl cp of %d MiB: direct %.1f MiB/s, crishim %.1f MiB/s, crishim/direct %.3f (goal >= 0.95)\n",
			max(o.cpBytes>>20, 1), median(cpDirect)/(1<<20), median(cpCrishim)/(1<<20), median(cpCrishim)/median(cpDirect))
	}
	fmt.Fprintf(w, "goal: every kubelet-side ratio <= 1.02; the worst is %s\n", worstName)
	// The last line, which scripts read.
	fmt.Fprintf(w, "worst kubelet-side ratio crishim/direct = %.3f\n", worst)
}

func seconds(s float64) string {
	if math.IsNaN(s) {
		return "-"
	}
	return time.Duration(s * float64(time.Second)).Round(10 * time.Microsecond).String()
}
