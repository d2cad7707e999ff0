package main

import (
	"context"
	"fmt"
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
	podStart   = "kubelet_pod_start_sli_duration_seconds"
	plegRelist = "kubelet_pleg_relist_duration_seconds"
)

// sumCount is a histogram's _sum and _count: together they give the exact mean of what it
// observed, where its buckets (the kubelet's start at 5 ms) give quantiles only to within a
// bucket's width.
type sumCount struct {
	sum   float64 // seconds
	count float64
}

// mean is the mean observation in seconds; NaN with none.
func (h sumCount) mean() float64 { return h.sum / h.count }

// scrape is the kubelet's histograms of interest, by series: runtime operations by
// operation_type ("op/<type>"), the pod start-up SLI ("pod start-up") and the PLEG relist
// ("PLEG relist").
type scrape map[string]sumCount

const (
	seriesPodStart = "pod start-up"
	seriesPLEG     = "PLEG relist"
)

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
	s, err := parseKubelet(string(b))
	if err != nil {
		return nil, fmt.Errorf("kubelet metrics of node %s: %w", nodeName, err)
	}
	return s, nil
}

// parseKubelet picks the series of interest out of the kubelet's text exposition. The pod
// start-up SLI and the PLEG relist are summed over their series, should they carry labels.
func parseKubelet(text string) (scrape, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	s := scrape{}
	if f := fams[runtimeOps]; f != nil {
		for _, m := range f.GetMetric() {
			s["op/"+label(m, "operation_type")] = sumCountOf(m)
		}
	}
	for name, series := range map[string]string{podStart: seriesPodStart, plegRelist: seriesPLEG} {
		f := fams[name]
		if f == nil || len(f.GetMetric()) == 0 {
			continue
		}
		var t sumCount
		for _, m := range f.GetMetric() {
			h := sumCountOf(m)
			t.sum, t.count = t.sum+h.sum, t.count+h.count
		}
		s[series] = t
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

func sumCountOf(m *dto.Metric) sumCount {
	return sumCount{sum: m.GetHistogram().GetSampleSum(), count: float64(m.GetHistogram().GetSampleCount())}
}

// since is what was observed between an earlier scrape and this one. A series the earlier
// scrape lacks, or whose count went down (the kubelet was restarted in between), counts
// from zero.
func (s scrape) since(before scrape) scrape {
	d := scrape{}
	for k, h := range s {
		b, ok := before[k]
		if !ok || b.count > h.count {
			d[k] = h
			continue
		}
		d[k] = sumCount{sum: h.sum - b.sum, count: h.count - b.count}
	}
	return d
}
