// Command bench is `make bench`: it measures what crishim adds to the
// kubelet's CRI calls. Each workload runs directly against a backend,
// through a plain byte-copying pipe (the floor any proxy pays), through
// crishim, and optionally through a second crishim build (--baseline) and
// a naive gRPC forwarder (--naive), interleaved in one run, with the
// kubelet's own client. It prints Go benchmark format for benchstat
// (docs/performance.md).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/test/crishimproc"
	"github.com/crishim/crishim/test/harness"
)

type options struct {
	crishim, baseline string
	naive             bool
	rounds            int
	clients           int
	tputFor           time.Duration
	leakCalls         int
	fake, containerd  bool
	bench             *regexp.Regexp
}

func main() {
	var o options
	serve := flag.String("serve", "", "internal: serve as the pipe or the naive forwarder (pipe|naive) on --listen in front of --backend")
	listen := flag.String("listen", "", "internal: the socket --serve listens on")
	backend := flag.String("backend", "", "internal: the backend socket of --serve")
	guardRuns := flag.Bool("guard", false, "read bench output (the files named as arguments) and check the micro guard on the medians over its runs")
	flag.StringVar(&o.crishim, "crishim", "bin/crishim", "crishim binary")
	flag.StringVar(&o.baseline, "baseline", "", "another crishim build, measured as target=baseline in the same interleaved rounds")
	flag.BoolVar(&o.naive, "naive", false, "also measure a naive gRPC forwarder (target=naive), for the micro guard")
	flag.IntVar(&o.rounds, "rounds", 2000, "interleaved rounds of the small calls (every target once per round); the slower calls take fewer")
	flag.IntVar(&o.clients, "clients", 64, "concurrent callers in the throughput runs and the RSS check")
	flag.DurationVar(&o.tputFor, "throughput-time", 3*time.Second, "length of each throughput run")
	flag.IntVar(&o.leakCalls, "leak-calls", 200_000, "calls through crishim before its RSS is read (0 skips the RSS check)")
	flag.BoolVar(&o.fake, "fake", true, "measure against the fake runtime")
	flag.BoolVar(&o.containerd, "containerd", true, "measure against the private runtime of the test bed ($RUNTIME; needs root)")
	bench := flag.String("bench", "", "run only the benchmarks whose name matches this regular expression (Version, ..., Throughput, RSS)")
	flag.Parse()
	o.bench = regexp.MustCompile(*bench)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case *guardRuns:
		err = runGuard(flag.Args())
	case *serve != "":
		err = serveHelper(ctx, *serve, *listen, *backend)
	default:
		err = run(ctx, os.Stdout, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func runGuard(files []string) error {
	all := map[string][]float64{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		added, err := readAdded(f)
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for k, v := range added {
			all[k] = append(all[k], v...)
		}
	}
	return guard(os.Stdout, all)
}

func run(ctx context.Context, w io.Writer, o options) error {
	dir, err := os.MkdirTemp("", "crishim-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		progress("load average: %s", strings.TrimSpace(string(load)))
	}
	printHeader(w)
	if o.fake {
		sock := filepath.Join(dir, "fake.sock")
		stopFake, err := serveFake(sock)
		if err != nil {
			return err
		}
		defer stopFake()
		if err := measureBackend(ctx, w, o, "fake", dir, sock, nil, fakeWorkloads(o.rounds), version()); err != nil {
			return err
		}
	}
	if !o.containerd {
		return nil
	}
	if os.Geteuid() != 0 {
		progress("containerd backend skipped: needs root")
		return nil
	}
	progress("starting the private runtime ($RUNTIME) with 100 pods of 3 containers")
	cd, err := harness.Start(ctx, harness.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = cd.Stop() }()
	conn, err := cd.Dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	p, err := populate(ctx, cd, runtimeapi.NewRuntimeServiceClient(conn), 100, 3)
	if err != nil {
		return err
	}
	// crishim gets the runtime's containerd API as the tests give it ("" for CRI-O).
	args := []string{"--containerd-address", cd.ContainerdAddress}
	return measureBackend(ctx, w, o, "containerd", dir, cd.Socket, args, containerdWorkloads(p, o.rounds), containerStatus(p.containers[0]))
}

// measureBackend puts the pipe, crishim and the optional targets in front
// of the backend on sock and runs every selected benchmark through each.
// tput is the throughput runs' call.
func measureBackend(ctx context.Context, w io.Writer, o options, backend, dir, sock string, args []string, wls []workload, tput call) error {
	targets := []*target{{name: "direct", dial: dialKubelet("unix://" + sock)}}
	start := func(name, bin string) (*crishimproc.Process, error) {
		p, err := crishimproc.Start(crishimproc.Options{
			Binary:          bin,
			Socket:          filepath.Join(dir, backend+"-"+name+".sock"),
			RuntimeEndpoint: "unix://" + sock,
			LogPath:         filepath.Join(dir, backend+"-"+name+".log"),
			Args:            args,
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		targets = append(targets, &target{name: name, pid: p.Cmd.Process.Pid, dial: dialKubelet(p.Endpoint)})
		return p, nil
	}
	crishim, err := start("crishim", o.crishim)
	if err != nil {
		return err
	}
	defer func() { _ = crishim.Stop() }()
	if o.baseline != "" {
		base, err := start("baseline", o.baseline)
		if err != nil {
			return err
		}
		defer func() { _ = base.Stop() }()
	}
	helpers := []string{"pipe"}
	if o.naive {
		helpers = append(helpers, "naive")
	}
	for _, name := range helpers {
		listen := filepath.Join(dir, backend+"-"+name+".sock")
		h, err := startHelper(name, listen, sock)
		if err != nil {
			return err
		}
		defer stopHelper(h)
		targets = append(targets, &target{name: name, pid: h.Process.Pid, dial: dialKubelet("unix://" + listen)})
	}
	defer func() {
		for _, t := range targets {
			t.close(context.Background())
		}
	}()
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = t.name
	}

	rng := rand.New(rand.NewPCG(1, 2)) // the same orders in every run
	for _, wl := range wls {
		if !o.bench.MatchString(wl.name) {
			continue
		}
		progress("%s: %s, %d rounds", backend, wl.name, wl.rounds)
		lat, err := interleaved(ctx, rng, targets, wl.call, wl.rounds)
		if err != nil {
			return fmt.Errorf("%s %s: %w", backend, wl.name, err)
		}
		for _, r := range latencyResults(backend, wl.name, names, lat) {
			fmt.Fprintln(w, r)
		}
	}
	if o.bench.MatchString("Throughput") {
		for _, t := range targets {
			progress("%s: throughput, %d clients, %s", backend, o.clients, t.name)
			cpuBefore, _ := cpuTime(t.pid)
			n, took, err := throughput(ctx, t, tput, o.clients, o.tputFor)
			if err != nil {
				return fmt.Errorf("%s throughput: %w", backend, err)
			}
			ms := []metric{{math.Round(float64(took.Nanoseconds()) / float64(max(n, 1))), "ns/op"}, {math.Round(float64(n) / took.Seconds()), "calls/s"}}
			if t.pid != 0 {
				cpuAfter, _ := cpuTime(t.pid)
				ms = append(ms, metric{math.Round(float64((cpuAfter - cpuBefore).Nanoseconds()) / float64(max(n, 1))), "cpu-ns/op"})
			}
			fmt.Fprintln(w, result{name: benchName("Throughput", backend, t.name), n: int(n), metrics: ms})
		}
	}
	if o.leakCalls > 0 && o.bench.MatchString("RSS") {
		r, err := rssAfter(ctx, targets[1], crishim.Metrics, tput, o.clients, o.leakCalls) // targets[1]: crishim, started first
		if err != nil {
			return fmt.Errorf("%s RSS: %w", backend, err)
		}
		r.name = benchName("RSS", backend, "crishim")
		fmt.Fprintln(w, r)
	}
	return nil
}

// rssAfter makes calls calls through crishim (t) and reads its RSS and
// goroutines after the first tenth and at the end: a leak shows as growth.
func rssAfter(ctx context.Context, t *target, metricsAddr string, c call, clients, calls int) (result, error) {
	progress("RSS: %d calls through crishim, %d clients", calls, clients)
	if err := t.redial(ctx); err != nil {
		return result{}, err
	}
	var rss [2]int64
	var gs [2]int
	for i, n := range []int{calls / 10, calls - calls/10} {
		if err := callN(ctx, t, c, clients, n); err != nil {
			return result{}, err
		}
		var err error
		if rss[i], err = procRSS(t.pid); err != nil {
			return result{}, err
		}
		if gs[i], err = goroutines(metricsAddr); err != nil {
			return result{}, err
		}
	}
	return result{n: calls, metrics: []metric{
		{mib(rss[1]), "rss-MiB"}, {mib(rss[1] - rss[0]), "rss-growth-MiB"},
		{float64(gs[1]), "goroutines"}, {float64(gs[1] - gs[0]), "goroutine-growth"},
	}}, nil
}

// serveHelper is this binary re-invoked as a target of its own: the pipe
// (on one P, as crishim runs) or the naive forwarder. It says "ready" on
// stdout once it listens and serves until ctx is done (SIGTERM).
func serveHelper(ctx context.Context, kind, listen, backend string) error {
	switch kind {
	case "pipe":
		return runPipe(ctx, listen, backend)
	case "naive":
		return runNaiveForwarder(ctx, listen, backend)
	}
	return fmt.Errorf("--serve %q: want pipe or naive", kind)
}

// startHelper runs this binary with --serve kind and waits for its ready
// line.
func startHelper(kind, listen, backend string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "--serve", kind, "--listen", listen, "--backend", backend)
	if kind == "pipe" {
		cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	// Its stderr shows why, if it says anything else (or nothing).
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s did not start: it said %q", kind, line)
	}
	return cmd, nil
}

// stopHelper sends SIGTERM and waits for the exit, killing the process
// after 10 s; a failure is reported, not returned: the results are out.
func stopHelper(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			progress("%s: %v", cmd.Args[2], err)
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		progress("%s ignored SIGTERM", cmd.Args[2])
	}
}
