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
	"bytes"
	"cmp"
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
	"sync/atomic"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/test/crishimproc"
	"github.com/crishim/crishim/test/harness"
)

// clients is how many concurrent callers the throughput runs and the RSS
// check put on one client.
const clients = 64

type options struct {
	crishim, baseline string
	naive             bool
	rounds            int
	tputFor           time.Duration
	leakCalls         int
	fake, containerd  bool
	bench             *regexp.Regexp
}

func main() {
	var o options
	serve := flag.String("serve", "", "internal: serve as the pipe or the naive forwarder (pipe|naive); the arguments are the socket to listen on and the backend's")
	guardRuns := flag.Bool("guard", false, "read bench output (the files named as arguments) and check the micro guard on the medians over its runs")
	flag.StringVar(&o.crishim, "crishim", "bin/crishim", "crishim binary")
	flag.StringVar(&o.baseline, "baseline", "", "another crishim build, measured as target=baseline in the same interleaved rounds")
	flag.BoolVar(&o.naive, "naive", false, "also measure a naive gRPC forwarder (target=naive), for the micro guard")
	flag.IntVar(&o.rounds, "rounds", 2000, "interleaved rounds of the small calls (every target once per round); the slower calls take fewer")
	flag.DurationVar(&o.tputFor, "throughput-time", 3*time.Second, "length of each throughput run (64 concurrent callers)")
	flag.IntVar(&o.leakCalls, "leak-calls", 200_000, "calls through crishim before its RSS is read")
	flag.BoolVar(&o.fake, "fake", true, "measure against the fake runtime")
	flag.BoolVar(&o.containerd, "containerd", true, "measure against the private runtime of the test bed ($RUNTIME; needs root)")
	bench := flag.String("bench", "", "run only the benchmarks whose name matches this regular expression (Version, ..., Throughput, RSS)")
	flag.Parse()
	o.bench = regexp.MustCompile(*bench)

	var err error
	switch {
	case *guardRuns:
		err = runGuard(flag.Args())
	case *serve == "pipe" && flag.NArg() == 2:
		err = runPipe(flag.Arg(0), flag.Arg(1))
	case *serve == "naive" && flag.NArg() == 2:
		err = runNaiveForwarder(flag.Arg(0), flag.Arg(1))
	case *serve != "":
		err = fmt.Errorf("--serve %q %q: want pipe or naive, a socket to listen on and the backend's", *serve, flag.Args())
	default:
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		err = run(ctx, os.Stdout, o)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// runGuard reads the runs' output from files and checks the micro guard.
func runGuard(files []string) error {
	var runs bytes.Buffer
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		runs.Write(b)
	}
	added, err := readAdded(&runs)
	if err != nil {
		return err
	}
	return guard(os.Stdout, added)
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
		if err := measureBackend(ctx, w, o, "fake", dir, sock, nil, fakeObjects(o.rounds)); err != nil {
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
	objs, err := populate(ctx, cd, runtimeapi.NewRuntimeServiceClient(conn), 100, 3, o.rounds)
	if err != nil {
		return err
	}
	// crishim gets the runtime's containerd API as the tests give it ("" for CRI-O).
	args := []string{"--containerd-address", cd.ContainerdAddress}
	return measureBackend(ctx, w, o, "containerd", dir, cd.Socket, args, objs)
}

// measureBackend puts the pipe, crishim and the optional targets in front
// of the backend on sock (crishim with args) and runs every selected
// benchmark on objs through each.
func measureBackend(ctx context.Context, w io.Writer, o options, backend, dir, sock string, args []string, objs objects) error {
	targets := []*target{{name: "direct", dial: dialKubelet("unix://" + sock)}}
	defer func() {
		for _, t := range targets {
			t.close(context.Background())
		}
	}()
	var crishim *crishimproc.Process // the first one, whose RSS is checked
	for _, c := range [][2]string{{"crishim", o.crishim}, {"baseline", o.baseline}} {
		if c[0] == "baseline" && c[1] == "" {
			continue
		}
		p, err := crishimproc.Start(crishimproc.Options{
			Binary:          c[1],
			Socket:          filepath.Join(dir, backend+"-"+c[0]+".sock"),
			RuntimeEndpoint: "unix://" + sock,
			LogPath:         filepath.Join(dir, backend+"-"+c[0]+".log"),
			Args:            args,
		})
		if err != nil {
			return fmt.Errorf("%s: %w", c[0], err)
		}
		defer func() { _ = p.Stop() }()
		crishim = cmp.Or(crishim, p)
		targets = append(targets, &target{name: c[0], pid: p.Cmd.Process.Pid, dial: dialKubelet(p.Endpoint)})
	}
	for _, name := range []string{"pipe", "naive"} {
		if name == "naive" && !o.naive {
			continue
		}
		listen := filepath.Join(dir, backend+"-"+name+".sock")
		h, err := startHelper(name, listen, sock)
		if err != nil {
			return err
		}
		defer func() { _ = h.Process.Kill(); _ = h.Wait() }()
		targets = append(targets, &target{name: name, pid: h.Process.Pid, dial: dialKubelet("unix://" + listen)})
	}

	rng := rand.New(rand.NewPCG(1, 2)) // the same orders in every run
	for _, wl := range workloads(objs, o.rounds) {
		if !o.bench.MatchString(wl.name) {
			continue
		}
		progress("%s: %s, %d rounds", backend, wl.name, wl.rounds)
		lat, err := interleaved(ctx, rng, targets, wl.call, wl.rounds)
		if err != nil {
			return fmt.Errorf("%s %s: %w", backend, wl.name, err)
		}
		for _, r := range latencyResults(backend, wl.name, targets, lat) {
			fmt.Fprintln(w, r)
		}
	}
	if o.bench.MatchString("Throughput") {
		for _, t := range targets {
			progress("%s: throughput, %d clients, %s", backend, clients, t.name)
			r, err := throughput(ctx, t, objs.throughputCall, o.tputFor)
			if err != nil {
				return fmt.Errorf("%s throughput: %w", backend, err)
			}
			r.name = benchName("Throughput", backend, t.name)
			fmt.Fprintln(w, r)
		}
	}
	if o.bench.MatchString("RSS") {
		r, err := rssAfter(ctx, targets[1], crishim.Metrics, objs.throughputCall, o.leakCalls) // targets[1]: crishim, started first
		if err != nil {
			return fmt.Errorf("%s RSS: %w", backend, err)
		}
		r.name = benchName("RSS", backend, "crishim")
		fmt.Fprintln(w, r)
	}
	return nil
}

// throughput runs the clients on t's client for d: its calls per second
// and, for a proxy, the CPU it spent per call.
func throughput(ctx context.Context, t *target, c call, d time.Duration) (result, error) {
	if err := t.redial(ctx); err != nil {
		return result{}, err
	}
	cpuBefore, _, _ := procStat(t.pid)
	start := time.Now()
	end := start.Add(d)
	n, err := hammer(ctx, t, c, clients, func() bool { return time.Now().Before(end) })
	took := time.Since(start)
	perCall := func(d time.Duration) float64 { return math.Round(float64(d.Nanoseconds()) / float64(max(n, 1))) }
	r := result{n: int(n), metrics: []metric{{perCall(took), "ns/op"}, {math.Round(float64(n) / took.Seconds()), "calls/s"}}}
	if t.pid != 0 {
		cpuAfter, _, _ := procStat(t.pid)
		r.metrics = append(r.metrics, metric{perCall(cpuAfter - cpuBefore), "cpu-ns/op"})
	}
	return r, err
}

// rssAfter makes calls calls through crishim (t) and reads its RSS and
// goroutines after the first tenth and at the end: a leak shows as growth.
func rssAfter(ctx context.Context, t *target, metricsAddr string, c call, calls int) (result, error) {
	progress("RSS: %d calls through crishim, %d clients", calls, clients)
	if err := t.redial(ctx); err != nil {
		return result{}, err
	}
	var rss [2]int64
	var gs [2]int
	for i, n := range []int{calls / 10, calls - calls/10} {
		var left atomic.Int64
		left.Store(int64(n))
		if _, err := hammer(ctx, t, c, clients, func() bool { return left.Add(-1) >= 0 }); err != nil {
			return result{}, err
		}
		var err error
		if _, rss[i], err = procStat(t.pid); err != nil {
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

// startHelper runs this binary with --serve kind (the pipe on one P, as
// crishim runs) and waits for its ready line. It dies with this process.
func startHelper(kind, listen, backend string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "--serve", kind, listen, backend)
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
