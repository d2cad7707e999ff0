// Command scale is the Notification API's scale harness (`make scale`, run by hand): the
// bed's real etcd and kube-apiserver (test/node.StartControlPlane, node index
// $CRISHIM_SCALE_NODE, default 11) with the v1alpha2 manifests, the real aggregator in this
// process, and N simulated nodes, each crishim's real node-side code (notification/node)
// with its own client certificate system:node:<name>, its own connection and watch, a fake
// CRI pod list and a notifier that succeeds after 5 ms. For each N it creates N×pods pods
// bound to the nodes, starts the nodes (--start-parallel at a time) and waits until every
// one is watching, as a fleet is long before a Notification, then creates one Notification
// selecting them all, and prints: time from create to
// Succeeded, the largest object, writes and watch events (total and per node), apiserver
// and etcd CPU seconds, 504s and refused writes; then each cost's growth exponent against N,
// and last the line
//
//	scale: N=<largest> completed in <s> s, largest object <bytes> B, watch events per node <x>
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/crishim/crishim/notification/aggregator"
	notifnode "github.com/crishim/crishim/notification/node"
	"github.com/crishim/crishim/notification/v1alpha2"
	"github.com/crishim/crishim/test/node"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

type config struct {
	runs    []runSize // one after the other
	pods    int
	fail    int // pods whose notifier fails
	late    int // nodes whose crishim starts late
	lateBy  time.Duration
	inject  float64 // fraction of node status writes that land but answer 504
	timeout time.Duration
	index   int
	keep    bool
	// startParallel bounds the nodes whose watch is being established at once: a fleet's
	// crishims are watching long before a Notification is created, not all starting in
	// one second.
	startParallel int
	pprof         string // directory for the apiserver's CPU profiles, "" for none
	// The aggregator's client rate, as cmd/crishim-notification-controller's defaults.
	aggQPS   float64
	aggBurst int
	window   int // the aggregator's FanOutWindow, 0 for its default
}

func parse() (config, error) {
	c := config{index: 11}
	nodes := flag.String("nodes", "100,1000", "comma-separated runs, each N (simulated nodes, --pods each) or NxP (N nodes, P pods each)")
	flag.IntVar(&c.pods, "pods", 1, "selected pods per node")
	flag.IntVar(&c.fail, "fail", 0, "pods (of each run) whose notifier fails")
	flag.IntVar(&c.late, "late", 0, "nodes (of each run) whose crishim starts --late-by after the Notification")
	flag.DurationVar(&c.lateBy, "late-by", 20*time.Second, "how late the late nodes start")
	flag.Float64Var(&c.inject, "inject-504", 0, "fraction of node status writes that are stored but answered 504")
	flag.DurationVar(&c.timeout, "timeout", 10*time.Minute, "give up on one run after this long")
	flag.BoolVar(&c.keep, "keep", false, "leave etcd and the apiserver running")
	flag.IntVar(&c.startParallel, "start-parallel", 50, "nodes establishing their watch at once before the Notification is created")
	flag.Float64Var(&c.aggQPS, "aggregator-qps", 200, "the aggregator's client-side request rate (crishim-notification-controller --kube-api-qps)")
	flag.IntVar(&c.aggBurst, "aggregator-burst", 400, "the aggregator's client-side burst (crishim-notification-controller --kube-api-burst)")
	flag.IntVar(&c.window, "fan-out-window", 0, "the aggregator's shares created and not yet started at a time (0: its default)")
	flag.StringVar(&c.pprof, "pprof", "", "write the apiserver's CPU profiles (watch start, run) into this directory")
	flag.Parse()
	for _, s := range strings.Split(*nodes, ",") {
		ns, ps, hasPods := strings.Cut(strings.TrimSpace(s), "x")
		n, err := strconv.Atoi(ns)
		p := c.pods
		if err == nil && hasPods {
			p, err = strconv.Atoi(ps)
		}
		if err != nil || n < 1 || p < 1 {
			return c, fmt.Errorf("--nodes %q: want N or NxP, positive numbers", *nodes)
		}
		c.runs = append(c.runs, runSize{nodes: n, pods: p})
	}
	if v := os.Getenv("CRISHIM_SCALE_NODE"); v != "" {
		i, err := strconv.Atoi(v)
		if err != nil || i < 1 || i > 200 {
			return c, fmt.Errorf("CRISHIM_SCALE_NODE=%q: want 1..200", v)
		}
		c.index = i
	}
	return c, nil
}

func run() error {
	cfg, err := parse()
	if err != nil {
		return err
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	manifests, err := node.ManifestsDir()
	if err != nil {
		return err
	}
	fmt.Printf("scale: starting etcd and kube-apiserver (node index %d)\n", cfg.index)
	opts := node.Options{Index: cfg.index, Log: log}
	if cfg.pprof != "" {
		opts.APIServerArgs = []string{"--profiling=true"}
	}
	cp, err := node.StartControlPlane(ctx, opts, manifests)
	if err != nil {
		return err
	}
	if !cfg.keep {
		defer cp.Stop()
	}
	admin, err := restConfig(cp.Kubeconfig, nil)
	if err != nil {
		return err
	}
	admin.QPS, admin.Burst = 500, 1000
	kube := kubernetes.NewForConfigOrDie(admin)
	dyn := dynamic.NewForConfigOrDie(admin)
	if err := waitCRDs(ctx, dyn); err != nil {
		return err
	}
	if err := ensureDefaultServiceAccount(ctx, kube); err != nil {
		return err
	}
	fmt.Printf("scale: machine load %s", loadavg())
	header := fmt.Sprintf("%-7s %-5s %-9s %-10s %-8s %-8s %-10s %-10s %-8s %-8s %-8s %-8s %-5s %-7s %-5s %s",
		"nodes", "pods", "done(s)", "maxobj(B)", "writes", "w/node", "watchev", "ev/node", "bm/node", "apiCPU", "etcdCPU", "simCPU", "504s", "refused", "409s", "result")
	var rows []row
	printRow := func(r row) {
		fmt.Printf("%-7d %-5d %-9.1f %-10d %-8d %-8.2f %-10d %-10.2f %-8.2f %-8.1f %-8.1f %-8.1f %-5d %-7d %-5d %s\n",
			r.nodes, r.nodes*r.pods, r.seconds, r.maxObject, r.writes, float64(r.writes)/float64(r.nodes), r.events,
			float64(r.events)/float64(r.nodes), float64(r.marks)/float64(r.nodes), r.apiCPU, r.etcdCPU, r.selfCPU, r.timeouts, r.refused, r.conflicts, r.result)
	}
	var failed error
	for i, rn := range cfg.runs {
		c := cfg
		c.pods = rn.pods
		r, err := runOnce(ctx, c, cp, kube, dyn, rn.nodes, i)
		if err != nil {
			failed = fmt.Errorf("run with %d nodes × %d pods: %w", rn.nodes, rn.pods, err)
			fmt.Println("scale:", failed)
			break
		}
		r.pods = rn.pods
		rows = append(rows, r)
		fmt.Println(header)
		printRow(r)
		fmt.Printf("scale: N=%d: %s; before the Notification, %d nodes' watches established in %.1f s (apiserver CPU %.1f s); load %s",
			r.nodes, r.codes, r.nodes-min(cfg.late, r.nodes), r.startSeconds, r.startAPICPU, loadavg())
	}
	if len(rows) == 0 {
		return failed
	}
	fmt.Println()
	fmt.Println(header)
	for _, r := range rows {
		printRow(r)
	}
	// Growth against N: from the first run to the largest with as many pods per node.
	a, b := rows[0], rows[0]
	for _, r := range rows {
		if r.pods == a.pods && r.nodes > b.nodes {
			b = r
		}
	}
	if b.nodes > a.nodes {
		exp := func(x, y float64) string {
			if x <= 0 || y <= 0 {
				return "n/a"
			}
			return fmt.Sprintf("%.2f", math.Log(y/x)/math.Log(float64(b.nodes)/float64(a.nodes)))
		}
		fmt.Printf("scale: growth exponents from N=%d to N=%d: time %s, largest object %s, writes %s, watch events %s, apiserver CPU %s, etcd CPU %s\n",
			a.nodes, b.nodes, exp(a.seconds, b.seconds), exp(float64(a.maxObject), float64(b.maxObject)), exp(float64(a.writes), float64(b.writes)),
			exp(float64(a.events), float64(b.events)), exp(a.apiCPU, b.apiCPU), exp(a.etcdCPU, b.etcdCPU))
	}
	last := rows[0]
	for _, r := range rows {
		if r.nodes > last.nodes {
			last = r
		}
	}
	if failed != nil {
		return failed
	}
	fmt.Printf("scale: N=%d: besides its watch events, each node's watch carried %.2f bookmarks (one a minute per watch, Notification or not)\n",
		last.nodes, float64(last.marks)/float64(last.nodes))
	fmt.Printf("scale: N=%d completed in %.1f s, largest object %d B, watch events per node %.2f\n",
		last.nodes, last.seconds, last.maxObject, float64(last.events)/float64(last.nodes))
	return nil
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return string(b)
}

type runSize struct{ nodes, pods int }

type row struct {
	nodes, pods       int
	seconds           float64
	maxObject         int
	writes, events    int64 // events: ADDED, MODIFIED, DELETED
	marks             int64 // bookmarks
	apiCPU, etcdCPU   float64
	timeouts, refused int64
	conflicts         int64
	result            string
	selfCPU           float64 // the harness process: the simulated nodes and the aggregator
	codes             string  // the nodes' answers other than 2xx, by method and code
	// Establishing the nodes' watches, before the Notification is created.
	startSeconds, startAPICPU, startSelfCPU float64
}

func waitCRDs(ctx context.Context, dyn dynamic.Interface) error {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err1 := dyn.Resource(v1alpha2.Resource).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1})
		_, err2 := dyn.Resource(v1alpha2.NodeResource).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1})
		_, err3 := dyn.Resource(v1alpha2.InboxResource).List(ctx, metav1.ListOptions{Limit: 1})
		if err1 == nil && err2 == nil && err3 == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(err1, err2, err3)
		}
		time.Sleep(500 * time.Millisecond) // polling the apiserver for a CRD to be served
	}
}

func restConfig(kubeconfig string, st *stats) (*rest.Config, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	if st != nil {
		rc.WrapTransport = st.wrap
	}
	return rc, nil
}

func runOnce(ctx context.Context, cfg config, cp *node.Node, kube kubernetes.Interface, dyn dynamic.Interface, n, round int) (row, error) {
	app := fmt.Sprintf("scale-%d", round)
	if cfg.aggQPS == 0 {
		cfg.aggQPS, cfg.aggBurst = 200, 400 // the Deployment's defaults
	}
	if cfg.startParallel == 0 {
		cfg.startParallel = 50
	}
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("sim-%d-%05d", round, i)
	}
	// Pods bound to the simulated nodes, as the scheduler would leave them.
	fmt.Printf("scale: N=%d: creating %d pods and %d node identities\n", n, n*cfg.pods, n)
	podsByNode, err := createPods(ctx, kube, app, names, cfg.pods)
	if err != nil {
		return row{}, err
	}
	failing := map[string]bool{}
	k := 0
	for _, nm := range names {
		for _, p := range podsByNode[nm] {
			if k < cfg.fail {
				failing[string(p.GetMetadata().GetUid())] = true
				k++
			}
		}
	}
	st := &stats{inject: cfg.inject}
	nodes := make([]*notifnode.Controller, n)
	for i, nm := range names {
		kc, err := cp.ClientKubeconfig(nm, "system:node:"+nm, "system:nodes")
		if err != nil {
			return row{}, err
		}
		rc, err := restConfig(kc, st)
		if err != nil {
			return row{}, err
		}
		d, err := dynamic.NewForConfig(rc)
		if err != nil {
			return row{}, err
		}
		nodes[i] = notifnode.New(notifnode.Options{Dynamic: d, NodeName: nm, Pods: fakeCRI{pods: podsByNode[nm]},
			Runner: fakeNotifier{failing: failing}, Workers: 1, Log: slog.New(slog.DiscardHandler)})
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	start := func(c *notifnode.Controller) {
		wg.Add(1)
		go func() { defer wg.Done(); c.Run(runCtx) }()
	}
	// The aggregator runs before the nodes, as in a cluster where it has been up all along,
	// with the client rate of the shipped Deployment (--kube-api-qps, --kube-api-burst).
	aggConfig, err := restConfig(cp.Kubeconfig, nil)
	if err != nil {
		return row{}, err
	}
	aggConfig.QPS, aggConfig.Burst = float32(cfg.aggQPS), cfg.aggBurst
	agg := aggregator.New(aggregator.Options{Kube: kubernetes.NewForConfigOrDie(aggConfig), Dynamic: dynamic.NewForConfigOrDie(aggConfig),
		FanOutWindow: cfg.window, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	wg.Add(1)
	go func() { defer wg.Done(); agg.Run(runCtx) }()

	// The nodes establish their watches first, startParallel at a time, and the Notification
	// is created once every one is watching: a fleet's crishims are running long before a
	// Notification is created. This phase is measured and printed on its own.
	late := min(cfg.late, n)
	cpuStart, selfStart := cpu(cp), selfCPU()
	begun := time.Now()
	var profWG sync.WaitGroup
	if cfg.pprof != "" {
		profWG.Add(1)
		go func() { defer profWG.Done(); profile(ctx, kube, cfg.pprof, fmt.Sprintf("start-%d", n), 20*time.Second) }()
	}
	if err := startPaced(runCtx, nodes[late:], cfg.startParallel, start); err != nil {
		return row{}, err
	}
	cpuWatching := cpu(cp)
	r0 := row{startSeconds: time.Since(begun).Seconds(), startAPICPU: cpuWatching[0] - cpuStart[0], startSelfCPU: selfCPU() - selfStart}
	fmt.Printf("scale: N=%d: %d nodes watching after %.1f s (apiserver CPU %.1f s, harness CPU %.1f s); %s\n",
		n, n-late, r0.startSeconds, r0.startAPICPU, r0.startSelfCPU, st.codes())
	profWG.Wait()

	time.Sleep(1100 * time.Millisecond) // the Notification must be created in a later second than the pods
	cpuBefore, selfBefore := cpu(cp), selfCPU()
	termBefore, rejBefore := apiserverCounters(ctx, kube)
	st.reset()
	created := time.Now()
	if cfg.pprof != "" {
		profWG.Add(1)
		go func() { defer profWG.Done(); profile(ctx, kube, cfg.pprof, fmt.Sprintf("run-%d", n), 30*time.Second) }()
		defer profWG.Wait()
		snap := time.AfterFunc(20*time.Second, func() { goroutines(ctx, kube, cfg.pprof, fmt.Sprintf("goroutines-%d", n)) })
		defer snap.Stop()
	}
	nObj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha2.SchemeGroupVersion.String(), "kind": v1alpha2.Kind,
		"metadata": map[string]any{"name": app, "namespace": "default"},
		"spec":     map[string]any{"containerNotifierName": "quiesce", "podSelector": map[string]any{"matchLabels": map[string]any{"app": app}}},
	}}
	if _, err := dyn.Resource(v1alpha2.Resource).Namespace("default").Create(ctx, nObj, metav1.CreateOptions{}); err != nil {
		return row{}, err
	}
	if late > 0 {
		time.AfterFunc(cfg.lateBy, func() {
			for _, c := range nodes[:late] {
				start(c)
			}
		})
	}
	var final *v1alpha2.Notification
	deadline := created.Add(cfg.timeout)
	nextProgress := created.Add(15 * time.Second)
	for {
		u, err := dyn.Resource(v1alpha2.Resource).Namespace("default").Get(ctx, app, metav1.GetOptions{})
		if err != nil {
			return row{}, err
		}
		var got v1alpha2.Notification
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &got); err != nil {
			return row{}, err
		}
		if meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha2.ConditionComplete) {
			final = &got
			break
		}
		if time.Now().After(deadline) {
			return row{}, fmt.Errorf("not complete after %s: %+v; %s", cfg.timeout, got.Status, st.codes())
		}
		if time.Now().After(nextProgress) {
			nextProgress = nextProgress.Add(15 * time.Second)
			term, rej := apiserverCounters(ctx, kube)
			fmt.Printf("scale: N=%d: after %.0f s: selected %d started %d succeeded %d failed %d; %d writes, %d watch events; %s; %.0f watchers closed, %.0f APF refusals\n", n, time.Since(created).Seconds(),
				got.Status.Selected, got.Status.Started, got.Status.Succeeded, got.Status.Failed, st.writes.Load(), st.events.Load(), st.codes(), term-termBefore, rej-rejBefore)
		}
		time.Sleep(200 * time.Millisecond) // polling as kubectl wait would
	}
	took := time.Since(created).Seconds()
	// The last writes' watch events reach the nodes after the status is complete.
	time.Sleep(2 * time.Second)
	cpuAfter := cpu(cp)
	r := r0
	r.nodes, r.seconds, r.writes, r.timeouts, r.refused = n, took, st.writes.Load(), st.timeouts.Load(), st.refused.Load()
	r.marks = st.marks.Load()
	r.events = st.events.Load() - r.marks
	r.apiCPU, r.etcdCPU, r.selfCPU, r.codes = cpuAfter[0]-cpuBefore[0], cpuAfter[1]-cpuBefore[1], selfCPU()-selfBefore, st.codes()
	termAfter, rejAfter := apiserverCounters(ctx, kube)
	r.codes += fmt.Sprintf("; apiserver: %.0f watchers closed for falling behind, %.0f requests refused by APF", termAfter-termBefore, rejAfter-rejBefore)
	sc := final.Status
	r.conflicts = st.conflict.Load()
	r.result = fmt.Sprintf("selected %d started %d succeeded %d failed %d (shown %d, +%d)", sc.Selected, sc.Started, sc.Succeeded, sc.Failed, len(sc.Failures), sc.FailuresNotShown)
	want := int32(n * cfg.pods)
	if sc.Selected != want || sc.Succeeded+sc.Failed != want || sc.Failed != int32(cfg.fail) {
		r.result += fmt.Sprintf(" WRONG: want %d selected, %d failed", want, cfg.fail)
	}
	r.maxObject, err = largest(ctx, dyn, app)
	if err != nil {
		return r, err
	}
	cancel()
	wg.Wait()
	return r, cleanup(ctx, kube, dyn, app, final.UID)
}

// largest is the size of the largest object of the run, as the apiserver serves it (JSON,
// managedFields included).
func largest(ctx context.Context, dyn dynamic.Interface, app string) (int, error) {
	maxSize := 0
	measure := func(u *unstructured.Unstructured) error {
		b, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		maxSize = max(maxSize, len(b))
		return nil
	}
	u, err := dyn.Resource(v1alpha2.Resource).Namespace("default").Get(ctx, app, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	if err := measure(u); err != nil {
		return 0, err
	}
	l, err := dyn.Resource(v1alpha2.NodeResource).Namespace("default").List(ctx, metav1.ListOptions{LabelSelector: v1alpha2.LabelNotificationUID + "=" + string(u.GetUID())})
	if err != nil {
		return 0, err
	}
	for i := range l.Items {
		if err := measure(&l.Items[i]); err != nil {
			return 0, err
		}
	}
	inboxes, err := dyn.Resource(v1alpha2.InboxResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	for i := range inboxes.Items {
		if err := measure(&inboxes.Items[i]); err != nil {
			return 0, err
		}
	}
	return maxSize, nil
}

// cleanup deletes the run's objects; no garbage collector runs here, so the shares too. The
// inboxes go as well: the simulated nodes of each run are new, so each run measures a
// fleet's first Notification, inboxes created.
func cleanup(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, app string, uid any) error {
	if err := dyn.Resource(v1alpha2.InboxResource).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := dyn.Resource(v1alpha2.NodeResource).Namespace("default").DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: fmt.Sprintf("%s=%v", v1alpha2.LabelNotificationUID, uid)}); err != nil {
		return err
	}
	if err := dyn.Resource(v1alpha2.Resource).Namespace("default").Delete(ctx, app, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return kube.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{LabelSelector: "app=" + app})
}

// ensureDefaultServiceAccount: no controller-manager runs, and pods need the default
// ServiceAccount to exist.
func ensureDefaultServiceAccount(ctx context.Context, kube kubernetes.Interface) error {
	_, err := kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
