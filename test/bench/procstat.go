package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
)

// procStat is a process's user+system CPU time so far and its resident
// set size in bytes.
func procStat(pid int) (cpu time.Duration, rss int64, err error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, 0, err
	}
	s, err := p.Stat()
	if err != nil {
		return 0, 0, err
	}
	return time.Duration(s.CPUTime() * float64(time.Second)), int64(s.ResidentMemory()), nil
}

// goroutines reads crishim's go_goroutines from its /metrics.
func goroutines(metricsAddr string) (int, error) {
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("%s/metrics: %w", metricsAddr, err)
	}
	ms := mfs["go_goroutines"].GetMetric()
	if len(ms) == 0 {
		return 0, fmt.Errorf("no go_goroutines in %s/metrics", metricsAddr)
	}
	return int(ms[0].GetGauge().GetValue()), nil
}
