package main

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// target is one way to reach a backend: directly, through crishim, or
// through the naive forwarder.
type target struct {
	name string
	sock string
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
	pid  int // the proxy's process, 0 for direct
	// calls, if set, records each latency call's span (--call-log).
	calls *callLog
}

func dialTarget(name, sock string, pid int) (*target, error) {
	t := &target{name: name, sock: sock, pid: pid}
	if err := t.redial(); err != nil {
		return nil, err
	}
	return t, nil
}

// redial gives the target a new connection (gRPC connects at its first
// call) and closes the one it had.
func (t *target) redial() error {
	conn, err := grpc.NewClient("unix://"+t.sock, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return fmt.Errorf("dial %s: %w", t.name, err)
	}
	if t.conn != nil {
		_ = t.conn.Close()
	}
	t.conn, t.rt = conn, runtimeapi.NewRuntimeServiceClient(conn)
	return nil
}

// close closes the target's connection of the moment.
func (t *target) close() { _ = t.conn.Close() }

// call is one unit of a workload, like one kubelet request.
type call func(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error

// interleaved runs n calls against every target, target after target within
// each round, so that whatever else the machine does hits all of them
// alike. It returns each target's latencies.
//
// Each round runs the targets in a fresh random order. A rotated order
// keeps their cycle, so each target nearly always follows the same one
// (the pipe followed direct, crishim the pipe, in four rounds of five), and
// the tail of a call (the client's and the runtime's pings and window
// updates, which cross a proxy's process) lands on the next target's call.
// With the rotation the pipe added about 10 µs less, and crishim about 8 µs
// less, than with the shuffle, in alternating runs (docs/performance.md):
// a shuffle spreads every tail over every target alike.
//
// A connection also carries a cost of its own for as long as it lives:
// two identical crishims, one run, differed by up to 28 µs on Version, and
// the difference followed the order in which their connections were made,
// not the process (docs/performance.md). So the rounds are cut into
// generations, and each starts with a new connection to every target,
// made and warmed in a fresh random order.
//
// timeout, when not 0, is put on every call as a deadline, as the kubelet
// does (its runtime-request-timeout, 2 minutes by default): gRPC then sends
// a grpc-timeout header with a new value in every request.
//
// calls is how many calls each target took, the warm-up ones included,
// for the CPU the proxies spent over the run.
func interleaved(ctx context.Context, targets []*target, c call, n int, timeout time.Duration) (lat map[string][]time.Duration, calls int, err error) {
	out := make(map[string][]time.Duration, len(targets))
	rng := rand.New(rand.NewPCG(1, 2)) // the same orders in every run
	order := slices.Clone(targets)
	shuffle := func() { rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] }) }
	from := 0
	for _, end := range generationBounds(n) {
		shuffle()
		for _, t := range order {
			if err := t.redial(); err != nil {
				return nil, 0, err
			}
		}
		// The rounds spread evenly over the generations, cut where the
		// intervals of the report draw them (generationBounds).
		rounds := end - from
		from = end
		for range max(rounds/20, 5) {
			shuffle()
			for _, t := range order {
				if err := c(ctx, t.rt); err != nil {
					return nil, 0, fmt.Errorf("%s: %w", t.name, err)
				}
			}
			calls++
		}
		for range rounds {
			shuffle()
			for _, t := range order {
				var mono int64
				if t.calls != nil {
					mono = monoNow()
				}
				start := time.Now()
				if err := callWithin(ctx, c, t.rt, timeout); err != nil {
					return nil, 0, fmt.Errorf("%s: %w", t.name, err)
				}
				out[t.name] = append(out[t.name], time.Since(start))
				if t.calls != nil {
					t.calls.record(t.name, mono, monoNow())
				}
			}
			calls++
		}
	}
	return out, calls, nil
}

// generations is how many times interleaved connects anew for n rounds:
// one generation per roundsPerGeneration rounds, at least
// minGenerations, at most one per round. The p50 of a target mixes its
// generations' costs, which spread by about 11 µs, so the more of them,
// the closer to their mean: with 24 of 125 rounds (3000 samples), two
// crishims of one binary differed by up to 4.2 µs on Version and
// ContainerStatus in two runs; with 120 of 25, by up to 1.9 µs in three
// (docs/performance.md, sixth pass).
func generations(n int) int {
	return min(n, max(minGenerations, n/roundsPerGeneration))
}

const (
	minGenerations      = 24
	roundsPerGeneration = 25
)

// callWithin makes one call, with a deadline of timeout unless it is 0.
func callWithin(ctx context.Context, c call, rt runtimeapi.RuntimeServiceClient, timeout time.Duration) error {
	if timeout == 0 {
		return c(ctx, rt)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c(ctx, rt)
}

// throughput runs clients concurrent callers against t for d and returns
// completed calls per second. Callers stop starting calls at the end rather
// than having them canceled, so no call fails for the clock's sake.
func throughput(ctx context.Context, t *target, c call, clients int, d time.Duration) (float64, int64, error) {
	var stop atomic.Bool
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	var done atomic.Int64
	errc := make(chan error, clients)
	start := time.Now()
	for range clients {
		go func() {
			for !stop.Load() && ctx.Err() == nil {
				if err := c(ctx, t.rt); err != nil {
					errc <- err
					return
				}
				done.Add(1)
			}
			errc <- nil
		}()
	}
	var first error
	for range clients {
		if err := <-errc; err != nil && first == nil {
			first = fmt.Errorf("%s: %w", t.name, err)
		}
	}
	elapsed := time.Since(start)
	return float64(done.Load()) / elapsed.Seconds(), done.Load(), first
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return quantile(s, p)
}

// quantile is the value at p (0 to 1) of sorted values, the lower of two
// where p falls between them.
func quantile[T cmp.Ordered](sorted []T, p float64) T {
	return sorted[int(p*float64(len(sorted)-1))]
}
