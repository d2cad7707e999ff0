package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// crishimMemory is where crishim's resident memory goes: the kernel's split of the RSS
// (/proc/<pid>/status: anonymous memory against mapped file pages, the binary's among them)
// and the Go runtime's own account from crishim's /metrics (its Go collector).
type crishimMemory struct {
	rssAnon, rssFile         int64 // bytes
	heapInuse, stackInuse    float64
	nextGC, goSys, heapIdle  float64
	heapReleased, goroutines float64
}

func (m crishimMemory) String() string {
	mib := func(v float64) string { return fmt.Sprintf("%.1f", v/(1<<20)) }
	return fmt.Sprintf("RssAnon %s MiB + RssFile %s MiB; Go: heap in use %s, stacks %s, heap idle %s (released %s), GC goal %s, runtime total %s MiB; %.0f goroutines",
		mib(float64(m.rssAnon)), mib(float64(m.rssFile)), mib(m.heapInuse), mib(m.stackInuse),
		mib(m.heapIdle), mib(m.heapReleased), mib(m.nextGC), mib(m.goSys), m.goroutines)
}

// readCrishimMemory reads both accounts of the crishim with this pid and /metrics at
// metricsURL (http://host:port).
func readCrishimMemory(ctx context.Context, pid int, metricsURL string) (crishimMemory, error) {
	var m crishimMemory
	var err error
	if m.rssAnon, err = statusBytes(pid, "RssAnon:"); err != nil {
		return m, err
	}
	if m.rssFile, err = statusBytes(pid, "RssFile:"); err != nil {
		return m, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metricsURL+"/metrics", nil)
	if err != nil {
		return m, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, fmt.Errorf("crishim's metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return m, fmt.Errorf("crishim's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		return m, fmt.Errorf("crishim's metrics: %w", err)
	}
	for name, dst := range map[string]*float64{
		"go_memstats_heap_inuse_bytes":    &m.heapInuse,
		"go_memstats_stack_inuse_bytes":   &m.stackInuse,
		"go_memstats_next_gc_bytes":       &m.nextGC,
		"go_memstats_sys_bytes":           &m.goSys,
		"go_memstats_heap_idle_bytes":     &m.heapIdle,
		"go_memstats_heap_released_bytes": &m.heapReleased,
		"go_goroutines":                   &m.goroutines,
	} {
		if f := fams[name]; f != nil && len(f.GetMetric()) > 0 {
			*dst = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return m, nil
}
