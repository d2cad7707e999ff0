package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crishim/crishim/test/node"
)

const (
	sideDirect  = "direct"
	sideCrishim = "crishim"
)

// turn is what one turn of one side measured.
type turn struct {
	side    string
	kubelet scrape        // the kubelet's histograms over the turn
	cpuPct  float64       // crishim's CPU over the steady state, % of one core
	rss     int64         // crishim's RSS at the end of the steady state
	mem     crishimMemory // where that RSS goes (crishim turns)
	cpBps   float64       // kubectl cp, bytes per second (0: not run)
	load    float64       // the machine's 1-minute load average at the end of the steady state
}

// turnTimeout bounds one turn: a kubelet that stops starting pods fails the run rather
// than hanging it.
const turnTimeout = 30 * time.Minute

func runTurn(ctx context.Context, n *node.Node, o options, side, ns string, log *slog.Logger) (turn, error) {
	ctx, cancel := context.WithTimeout(ctx, turnTimeout)
	defer cancel()
	cs := n.Clientset
	t := turn{side: side}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return t, fmt.Errorf("create namespace: %w", err)
	}
	defer func() {
		// A fresh context: the turn's may be what ended.
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer dcancel()
		if err := cs.CoreV1().Namespaces().Delete(dctx, ns, metav1.DeleteOptions{}); err != nil {
			log.Error("delete namespace", "ns", ns, "err", err)
			return
		}
		if err := waitGone(dctx, cs, ns); err != nil {
			log.Error("namespace", "err", err)
		}
	}()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	st, err := watchStartups(wctx, cs, ns)
	if err != nil {
		return t, err
	}
	before, err := scrapeKubelet(ctx, cs, n.Name)
	if err != nil {
		return t, err
	}
	for _, d := range deployments(ns, o.pods) {
		if _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return t, fmt.Errorf("create deployment %s: %w", d.Name, err)
		}
	}
	start := time.Now()
	if err := waitReady(ctx, cs, ns, o.pods, st.changed); err != nil {
		return t, err
	}
	log.Info("pods Ready", "side", side, "pods", o.pods, "took", time.Since(start).Round(time.Millisecond))
	for i := range o.churns {
		if err := churn(ctx, cs, ns, o.pods, st.changed); err != nil {
			return t, fmt.Errorf("churn %d: %w", i+1, err)
		}
	}
	t.cpuPct, t.rss, err = steadyState(ctx, n, o.steady)
	if err != nil {
		return t, err
	}
	if t.load, err = loadAverage(); err != nil {
		return t, err
	}
	if side == sideCrishim {
		pid, err := n.CrishimPID()
		if err != nil {
			return t, err
		}
		if t.mem, err = readCrishimMemory(ctx, pid, n.CrishimMetrics); err != nil {
			return t, err
		}
	}
	if o.cpBytes > 0 {
		if t.cpBps, err = copyOut(ctx, n, ns, o.cpBytes); err != nil {
			return t, err
		}
	}
	after, err := scrapeKubelet(ctx, cs, n.Name)
	if err != nil {
		return t, err
	}
	t.kubelet = after.since(before)
	return t, nil
}

// steadyState waits d with every pod running and reads crishim's CPU time over it and its
// RSS at its end. crishim runs on both sides (idle on the direct one), so both are read.
func steadyState(ctx context.Context, n *node.Node, d time.Duration) (cpuPct float64, rss int64, err error) {
	pid, err := n.CrishimPID()
	if err != nil {
		return 0, 0, err
	}
	c0, err := cpuTime(pid)
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(d): // the steady state is a length of time by definition
	}
	c1, err := cpuTime(pid)
	if err != nil {
		return 0, 0, err
	}
	rss, err = rssBytes(pid)
	if err != nil {
		return 0, 0, err
	}
	return 100 * float64(c1-c0) / float64(time.Since(t0)), rss, nil
}

// copyOut writes a file of size bytes (whole MiB, at least one) in one of the turn's pods and
// times `kubectl cp` of it out of the pod: exec streaming, through crishim's streaming server
// on its side.
func copyOut(ctx context.Context, n *node.Node, ns string, size int64) (float64, error) {
	pods, err := n.Clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "deployment=plain"})
	if err != nil || len(pods.Items) == 0 {
		return 0, fmt.Errorf("a pod to copy from: %d pods, %v", len(pods.Items), err)
	}
	pod := pods.Items[0].Name
	mib := max(size>>20, 1)
	if out, err := n.Kubectl(ctx, nil, "-n", ns, "exec", pod, "--", "dd", "if=/dev/zero", "of=/tmp/big", "bs=1048576", "count="+strconv.FormatInt(mib, 10)); err != nil {
		return 0, fmt.Errorf("write the file to copy: %w: %s", err, out)
	}
	dir, err := os.MkdirTemp("", "crishim-bench-cp-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	dst := filepath.Join(dir, "big")
	t0 := time.Now()
	if out, err := n.Kubectl(ctx, nil, "cp", ns+"/"+pod+":/tmp/big", dst); err != nil {
		return 0, fmt.Errorf("kubectl cp: %w: %s", err, out)
	}
	took := time.Since(t0)
	fi, err := os.Stat(dst)
	if err != nil {
		return 0, err
	}
	if fi.Size() != mib<<20 {
		return 0, fmt.Errorf("kubectl cp copied %d bytes, want %d", fi.Size(), mib<<20)
	}
	return float64(fi.Size()) / took.Seconds(), nil
}
