// Command bench is `make bench`: it measures what crishim adds to the
// kubelet's CRI calls by running each workload directly against a backend,
// through a plain byte-copying pipe (the floor), through crishim and through
// a naive gRPC forwarder, interleaved in one run, and reports latencies,
// ratios, throughput, CPU and memory.
package main

import (
	"context"
	"flag"
	"fmt"
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
	crishim      string
	baseline     string
	output       string
	samples      int
	clients      int
	tputFor      time.Duration
	leakCalls    int
	containerd   bool
	pods         int
	perPod       int
	streamMiB    int
	streamRounds int
	fake         bool
	only         *regexp.Regexp // nil: every workload
	callTimeout  time.Duration
	callLog      string
	calls        *callLog // open while the run goes, if callLog is set
}

// wants says whether a workload (or "throughput", "leak check") is selected
// by --only.
func (o options) wants(name string) bool {
	return o.only == nil || o.only.MatchString(name)
}

func main() {
	var o options
	naiveListen := flag.String("naive-listen", "", "internal: run as the naive forwarder on this socket")
	naiveBackend := flag.String("naive-backend", "", "internal: the naive forwarder's backend socket")
	pipeListen := flag.String("pipe-listen", "", "internal: run as the byte-copying pipe on this socket")
	pipeBackend := flag.String("pipe-backend", "", "internal: the pipe's backend socket")
	residenceOf := flag.String("residence", "", "print how long each proxy holds a call's bytes, from a perf trace in this file (see docs/performance.md); the arguments name the processes, NAME=PID")
	combine := flag.Bool("combine", false, "combine the JSON reports (-o json) named as arguments: per workload, crishim's added/pipe and the --baseline difference over the runs (see docs/performance.md)")
	fakeOnly := flag.String("serve-fake", "", "only serve the fake runtime on this socket until interrupted (for profiling crishim by hand)")
	flag.StringVar(&o.crishim, "crishim", "bin/crishim", "crishim binary")
	flag.StringVar(&o.baseline, "baseline", "", "another crishim binary, measured in the same runs, interleaved call by call with the rest, so that two builds compare under the same noise (empty: none)")
	flag.StringVar(&o.output, "o", "table", "output: table or json")
	flag.IntVar(&o.samples, "samples", 2000, "interleaved samples per target for the fastest workloads (slower ones take fewer)")
	flag.IntVar(&o.clients, "clients", 64, "concurrent clients for the throughput runs")
	flag.DurationVar(&o.tputFor, "throughput-time", 3*time.Second, "length of each throughput run")
	flag.IntVar(&o.leakCalls, "leak-calls", 1_000_000, "calls through crishim for the leak check (0 skips it)")
	flag.BoolVar(&o.containerd, "containerd", true, "also measure against the private containerd (needs root)")
	flag.IntVar(&o.pods, "pods", 100, "pod sandboxes on the private containerd")
	flag.IntVar(&o.perPod, "containers-per-pod", 3, "containers per pod on the private containerd")
	flag.IntVar(&o.streamMiB, "stream-mib", 256, "MiB per exec and port-forward transfer on the private containerd (0 skips streaming)")
	flag.IntVar(&o.streamRounds, "stream-rounds", 7, "transfers per target for each streaming workload, direct and crishim alternating")
	flag.BoolVar(&o.fake, "fake", true, "measure against the fake runtime")
	flag.StringVar(&o.callLog, "call-log", "", "write each latency call's target and CLOCK_MONOTONIC start and end (ns) to this file; with --residence, read it to split those calls into segments (see docs/performance.md)")
	flag.DurationVar(&o.callTimeout, "call-timeout", 0, "a deadline on every latency call, as the kubelet puts one (--runtime-request-timeout, 2m): each request then carries a grpc-timeout header of its own (0: none)")
	only := flag.String("only", "", "run only the workloads whose name matches this regular expression (\"throughput\", \"leak check\" and the streaming names count as workloads)")
	flag.Parse()
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: --only:", err)
			os.Exit(2)
		}
		o.only = re
	}
	if o.streamMiB < 0 || o.streamRounds < 1 {
		fmt.Fprintln(os.Stderr, "bench: --stream-mib must be 0 or more and --stream-rounds 1 or more")
		os.Exit(2)
	}
	if *combine {
		if err := runCombine(os.Stdout, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "bench: --combine:", err)
			os.Exit(2)
		}
		return
	}
	if *residenceOf != "" {
		if err := runResidence(os.Stdout, *residenceOf, o.callLog, flag.Args()); err != nil {
			fmt.Fprintln(os.Stderr, "bench: --residence:", err)
			os.Exit(2)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *naiveListen != "" {
		if err := runNaiveForwarder(ctx, *naiveListen, *naiveBackend); err != nil {
			fmt.Fprintln(os.Stderr, "naive forwarder:", err)
			os.Exit(1)
		}
		return
	}
	if *pipeListen != "" {
		if err := runPipe(ctx, *pipeListen, *pipeBackend); err != nil {
			fmt.Fprintln(os.Stderr, "pipe:", err)
			os.Exit(1)
		}
		return
	}
	if *fakeOnly != "" {
		stopFake, err := serveFake(*fakeOnly)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		<-ctx.Done()
		stopFake()
		return
	}
	rep, err := run(ctx, o)
	if rep != nil {
		if perr := rep.print(os.Stdout, o.output); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

func run(ctx context.Context, o options) (*report, error) {
	if o.callLog == "" {
		return runBackends(ctx, o)
	}
	calls, err := openCallLog(o.callLog)
	if err != nil {
		return nil, err
	}
	o.calls = calls
	rep, err := runBackends(ctx, o)
	if cerr := calls.close(); err == nil {
		err = cerr
	}
	return rep, err
}

func runBackends(ctx context.Context, o options) (*report, error) {
	dir, err := os.MkdirTemp("", "crishim-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rep := &report{Machine: machine(), Builds: map[string]string{}}
	for target, bin := range map[string]string{"crishim": o.crishim, "baseline": o.baseline} {
		if bin == "" {
			continue
		}
		id, err := buildID(bin)
		if err != nil {
			return nil, err
		}
		rep.Builds[target] = id
	}

	fakeSock := filepath.Join(dir, "fake.sock")
	stopFake, err := serveFake(fakeSock)
	if err != nil {
		return nil, err
	}
	defer stopFake()
	if o.fake {
		progress("fake runtime: %d samples per workload, interleaved direct / pipe / crishim / crishim-grpc / naive", o.samples)
		if err := measureBackend(ctx, o, rep, "fake", dir, fakeSock, nil, fakeWorkloads(o.samples), true, nil); err != nil {
			return rep, err
		}
	}
	if !o.containerd {
		return rep, nil
	}
	if os.Geteuid() != 0 {
		rep.Notes = append(rep.Notes, "containerd backend skipped: needs root")
		return rep, nil
	}
	progress("starting the private runtime ($RUNTIME, default containerd 2.4) and %d pods with %d containers each", o.pods, o.perPod)
	cd, err := harness.Start(ctx, harness.Options{})
	if err != nil {
		return rep, err
	}
	defer func() {
		progress("tearing down the private containerd")
		_ = cd.Stop()
	}()
	rep.Runtime = cd.RuntimeName + " " + cd.RuntimeVersion
	progress("runtime: %s", rep.Runtime)
	conn, err := cd.Dial()
	if err != nil {
		return rep, err
	}
	defer conn.Close()
	start := time.Now()
	p, err := populate(ctx, cd, runtimeapi.NewRuntimeServiceClient(conn), o.pods, o.perPod)
	if err != nil {
		return rep, err
	}
	progress("populated in %s", time.Since(start).Round(time.Second))
	var stream *streamSetup
	if o.streamMiB > 0 {
		// The exec runs in the last populated container (the other workloads use the first ones).
		stream, err = setupStreaming(ctx, cd, runtimeapi.NewRuntimeServiceClient(conn), p.containers[len(p.containers)-1], int64(o.streamMiB)<<20)
		if err != nil {
			return rep, err
		}
	}
	// crishim gets the runtime's containerd API as the tests give it ("" for CRI-O).
	address := []string{"--containerd-address", cd.ContainerdAddress}
	return rep, measureBackend(ctx, o, rep, "containerd", dir, cd.Socket, address, containerdWorkloads(p, o.samples), false, stream)
}

// measureBackend puts the pipe, crishim (both relays) and the naive
// forwarder in front of backend and runs the workloads through every way
// in, the direct one included; then, given a
// streamSetup, the streaming workloads directly and through crishim.
func measureBackend(ctx context.Context, o options, rep *report, backend, dir, sock string, args []string, wls []workload, fake bool, stream *streamSetup) error {
	crishim, err := startCrishim(o.crishim, dir, backend+"-crishim", sock, args...)
	if err != nil {
		return err
	}
	defer func() { _ = crishim.Stop() }()
	// The same binary with the grpc-go relay, the fallback operators can
	// pick: every report shows what the h2 relay buys.
	grpcRelay, err := startCrishim(o.crishim, dir, backend+"-crishim-grpc", sock, append([]string{"--relay=grpc"}, args...)...)
	if err != nil {
		return err
	}
	defer func() { _ = grpcRelay.Stop() }()
	naiveSock := filepath.Join(dir, backend+"-naive.sock")
	naive, err := startHelper("naive forwarder", naiveSock, nil, "--naive-listen", naiveSock, "--naive-backend", sock)
	if err != nil {
		return err
	}
	defer stopHelper(naive)
	// The floor: bytes copied, nothing else, on one P as crishim.
	pipeSock := filepath.Join(dir, backend+"-pipe.sock")
	pipe, err := startHelper("pipe", pipeSock, []string{"GOMAXPROCS=1"}, "--pipe-listen", pipeSock, "--pipe-backend", sock)
	if err != nil {
		return err
	}
	defer stopHelper(pipe)

	direct, err := dialTarget("direct", sock, 0)
	if err != nil {
		return err
	}
	viaCrishim, err := dialTarget("crishim", crishim.Socket, crishim.Cmd.Process.Pid)
	if err != nil {
		return err
	}
	viaNaive, err := dialTarget("naive", naiveSock, naive.cmd.Process.Pid)
	if err != nil {
		return err
	}
	viaPipe, err := dialTarget("pipe", pipeSock, pipe.cmd.Process.Pid)
	if err != nil {
		return err
	}
	viaGRPCRelay, err := dialTarget("crishim-grpc", grpcRelay.Socket, grpcRelay.Cmd.Process.Pid)
	if err != nil {
		return err
	}
	targets := []*target{direct, viaPipe, viaCrishim, viaGRPCRelay, viaNaive}
	if o.baseline != "" {
		base, err := startCrishim(o.baseline, dir, backend+"-crishim-baseline", sock, args...)
		if err != nil {
			return fmt.Errorf("--baseline: %w", err)
		}
		defer func() { _ = base.Stop() }()
		viaBaseline, err := dialTarget("baseline", base.Socket, base.Cmd.Process.Pid)
		if err != nil {
			return err
		}
		targets = append(targets, viaBaseline)
	}
	for _, t := range targets {
		defer t.close()
		t.calls = o.calls
	}

	for _, wl := range wls {
		if !o.wants(wl.name) {
			continue
		}
		progress("%s: %s", backend, wl.name)
		before := make(map[string]time.Duration, len(targets))
		for _, t := range targets {
			before[t.name], _ = cpuTime(t.pid)
		}
		lat, calls, err := interleaved(ctx, targets, wl.call, wl.samples, o.callTimeout)
		if err != nil {
			return fmt.Errorf("%s %s: %w", backend, wl.name, err)
		}
		cpu := make(map[string]time.Duration, len(targets))
		for _, t := range targets {
			after, _ := cpuTime(t.pid)
			cpu[t.name] = after - before[t.name]
		}
		rep.addLatency(backend, wl.name, lat, cpu, calls)
	}

	tputCall := version()
	tputName := "Version"
	if !fake {
		tputCall, tputName = containerStatus(""), "ContainerStatus"
		for _, wl := range wls {
			if wl.name == "ContainerStatus" {
				tputCall = wl.call
			}
		}
	}
	for _, t := range targets {
		if !o.wants("throughput") {
			break
		}
		progress("%s: throughput, %d clients, %s", backend, o.clients, t.name)
		cpuBefore, _ := cpuTime(t.pid)
		rate, calls, err := throughput(ctx, t, tputCall, o.clients, o.tputFor)
		if err != nil {
			return fmt.Errorf("%s throughput: %w", backend, err)
		}
		var perK time.Duration
		if t.pid != 0 {
			cpuAfter, _ := cpuTime(t.pid)
			perK = (cpuAfter - cpuBefore) * 1000 / time.Duration(max(calls, 1))
		}
		rep.addThroughput(backend, fmt.Sprintf("%s x%d clients", tputName, o.clients), t.name, rate, perK)
	}
	if stream != nil {
		if err := measureStreaming(ctx, o, rep, backend, stream, direct, viaCrishim); err != nil {
			return err
		}
	}
	if r, err := rss(viaCrishim.pid); err == nil {
		rep.addRSS(backend, "after the workloads above", r)
	}
	if fake && o.leakCalls > 0 && o.wants("leak check") {
		return leakCheck(ctx, o, rep, viaCrishim, crishim.Metrics)
	}
	return nil
}

// startCrishim runs crishim binary bin in front of the runtime on sock,
// with its socket and log in dir under name.
func startCrishim(bin, dir, name, sock string, args ...string) (*crishimproc.Process, error) {
	bin, err := privateCopy(bin, dir, name)
	if err != nil {
		return nil, err
	}
	return crishimproc.Start(crishimproc.Options{
		Binary:          bin,
		Socket:          filepath.Join(dir, name+".sock"),
		RuntimeEndpoint: "unix://" + sock,
		LogPath:         filepath.Join(dir, name+".log"),
		Args:            args,
	})
}

// helper is this benchmark's binary re-invoked to serve one of its
// reference points (the naive forwarder, the pipe) on a socket.
type helper struct {
	name string
	cmd  *exec.Cmd
}

// startHelper runs this binary with args, and env added to the
// environment, and waits until it has created its socket listen.
func startHelper(name, listen string, env []string, args ...string) (*helper, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// Named after its socket, which names the backend too.
	self, err = privateCopy(self, filepath.Dir(listen), strings.TrimSuffix(filepath.Base(listen), ".sock"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for range 200 {
		if _, err := os.Stat(listen); err == nil {
			return &helper{name: name, cmd: cmd}, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return nil, fmt.Errorf("%s did not start", name)
}

// stopHelper sends SIGTERM and waits for the exit (killing the process if
// it has not exited after 10 s); a failure is reported, not returned, as the
// measurements are done by then.
func stopHelper(h *helper) {
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- h.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			progress("%s: %v", h.name, err)
		}
	case <-time.After(10 * time.Second):
		_ = h.cmd.Process.Kill()
		<-exited
		progress("%s ignored SIGTERM", h.name)
	}
}

// leakCheck sends calls through crishim and samples its RSS and goroutines
// along the way: after the first tenth they must stay flat.
func leakCheck(ctx context.Context, o options, rep *report, t *target, metricsAddr string) error {
	const checkpoints = 5
	per := o.leakCalls / checkpoints
	progress("leak check: %d calls through crishim, %d clients", o.leakCalls, o.clients)
	var samples []leakSample
	for i := range checkpoints {
		if err := callN(ctx, t, version(), o.clients, per); err != nil {
			return err
		}
		r, err := rss(t.pid)
		if err != nil {
			return err
		}
		g, err := goroutines(metricsAddr)
		if err != nil {
			return err
		}
		samples = append(samples, leakSample{Calls: (i + 1) * per, RSS: r, Goroutines: g})
	}
	rep.Leak = &leakReport{Samples: samples, Flat: flat(samples)}
	return nil
}

// flat allows the noise of the garbage collector's pacing (RSS within 20%
// or 4 MiB of the first checkpoint), not growth.
func flat(s []leakSample) bool {
	first, last := s[0], s[len(s)-1]
	return last.RSS <= max(first.RSS*12/10, first.RSS+4<<20) && last.Goroutines <= first.Goroutines+5
}

// callN makes n calls with the given concurrency.
func callN(ctx context.Context, t *target, c call, clients, n int) error {
	work := make(chan struct{}, n)
	for range n {
		work <- struct{}{}
	}
	close(work)
	errc := make(chan error, clients)
	for range clients {
		go func() {
			for range work {
				if err := c(ctx, t.rt); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	var first error
	for range clients {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
}
