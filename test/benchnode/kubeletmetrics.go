package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

const (
	runtimeOps = "kubelet_runtime_operations_duration_seconds"
	plegRelist = "kubelet_pleg_relist_duration_seconds"
)

// histogram is one histogram's cumulative buckets: upper bound -> count.
type histogram struct {
	bounds []float64
	counts []float64
	total  float64
}

// scrape is the kubelet's histograms of interest, by series: runtime operations by
// operation_type ("op/<type>") and the PLEG relist ("pleg").
type scrape map[string]histogram

// scrapeKubelet reads the kubelet's /metrics through the API server's node proxy, as an
// administrator would (the kubelet serves it to authenticated, authorized clients only).
// A kubelet just restarted may not be reachable through the proxy yet (503): it is asked
// again, every second, for up to a minute.
func scrapeKubelet(ctx context.Context, cs kubernetes.Interface, nodeName string) (scrape, error) {
	var b []byte
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		b, last = cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + nodeName + "/proxy/metrics").DoRaw(ctx)
		return last == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("kubelet metrics of node %s: %w (last answer: %v)", nodeName, err, last)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		return nil, fmt.Errorf("kubelet metrics of node %s: %w", nodeName, err)
	}
	s := scrape{}
	if f := fams[runtimeOps]; f != nil {
		for _, m := range f.GetMetric() {
			s["op/"+label(m, "operation_type")] = histogramOf(m)
		}
	}
	if f := fams[plegRelist]; f != nil && len(f.GetMetric()) > 0 {
		s["pleg"] = histogramOf(f.GetMetric()[0])
	}
	return s, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func histogramOf(m *dto.Metric) histogram {
	h := histogram{total: float64(m.GetHistogram().GetSampleCount())}
	for _, b := range m.GetHistogram().GetBucket() {
		h.bounds = append(h.bounds, b.GetUpperBound())
		h.counts = append(h.counts, float64(b.GetCumulativeCount()))
	}
	return h
}

// since is what was observed between an earlier scrape and this one. A series the earlier
// scrape lacks counts from zero (the kubelet was restarted in between, or had not yet done
// that operation).
func (s scrape) since(before scrape) scrape {
	d := scrape{}
	for k, h := range s {
		b, ok := before[k]
		if !ok || len(b.counts) != len(h.counts) || b.total > h.total {
			d[k] = h
			continue
		}
		dh := histogram{bounds: h.bounds, counts: make([]float64, len(h.counts)), total: h.total - b.total}
		for i := range h.counts {
			dh.counts[i] = h.counts[i] - b.counts[i]
		}
		d[k] = dh
	}
	return d
}

// quantile estimates the q-quantile as Prometheus's histogram_quantile does: linearly within
// the bucket it falls in, the first bucket starting at 0. NaN when there are no samples; the
// highest finite bound when it falls in the +Inf bucket.
func (h histogram) quantile(q float64) float64 {
	if h.total == 0 || len(h.bounds) == 0 {
		return math.NaN()
	}
	rank := q * h.total
	i := sort.Search(len(h.counts), func(i int) bool { return h.counts[i] >= rank })
	if i == len(h.counts) {
		return h.bounds[len(h.bounds)-1]
	}
	if math.IsInf(h.bounds[i], 1) {
		if i == 0 {
			return math.NaN()
		}
		return h.bounds[i-1]
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = h.bounds[i-1], h.counts[i-1]
	}
	in := h.counts[i] - below
	if in == 0 {
		return h.bounds[i]
	}
	return lo + (h.bounds[i]-lo)*(rank-below)/in
}
