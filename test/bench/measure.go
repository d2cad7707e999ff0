package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
)

// requestTimeout is the kubelet's --runtime-request-timeout default: its
// client puts it on every call as a deadline, so every request carries a
// grpc-timeout header of its own.
const requestTimeout = 2 * time.Minute

// target is one way to reach a backend: directly, through the pipe,
// through crishim (or its baseline build) or through the naive forwarder.
type target struct {
	name string
	pid  int // the process in front of the backend; 0 for direct
	// dial makes a new client. It is the kubelet's (dialKubelet) but for
	// the tests.
	dial func(ctx context.Context) (internalapi.RuntimeService, error)
	rt   internalapi.RuntimeService // the client of the current generation
}

// dialKubelet makes a client the way the kubelet does: k8s.io/cri-client,
// with the kubelet's request timeout as the connection and call deadline.
// The client checks the connection with a Version call before it returns.
func dialKubelet(endpoint string) func(ctx context.Context) (internalapi.RuntimeService, error) {
	return func(ctx context.Context) (internalapi.RuntimeService, error) {
		return remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(requestTimeout).Build(ctx)
	}
}

// redial gives t a new client and closes the one it had.
func (t *target) redial(ctx context.Context) error {
	rt, err := t.dial(ctx)
	if err != nil {
		return fmt.Errorf("%s: dial: %w", t.name, err)
	}
	t.close(ctx)
	t.rt = rt
	return nil
}

func (t *target) close(ctx context.Context) {
	if t.rt != nil {
		_ = t.rt.Close(ctx)
		t.rt = nil
	}
}

// call is one unit of a workload, like one kubelet request.
type call func(ctx context.Context, rt internalapi.RuntimeService) error

// roundsPerGeneration is how many rounds a client lives. A connection
// carries a cost of its own for as long as it lives: two identical crishims
// in one run differed by up to 28 µs on Version, following the order their
// connections were made, not the process. Fresh clients every 25 rounds
// mix many connections into every target's numbers (two crishims of one
// binary then agreed within 2 µs).
const roundsPerGeneration = 25

// warmRounds are the untimed rounds at the start of each generation.
const warmRounds = 2

// interleaved makes rounds calls of c against every target and returns
// each target's latencies. Every round calls every target once, in a fresh
// random order, so that whatever else the machine does hits all of them
// alike; a fixed or rotated order let the tail of one call (the peers'
// pings and window updates) land on the same next target every time, which
// moved the pipe by about 10 µs and crishim by 8. Every roundsPerGeneration
// rounds each target gets a new client, made in a fresh random order too.
func interleaved(ctx context.Context, rng *rand.Rand, targets []*target, c call, rounds int) (map[string][]time.Duration, error) {
	out := make(map[string][]time.Duration, len(targets))
	order := slices.Clone(targets)
	shuffle := func() { rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] }) }
	for done := 0; done < rounds; {
		shuffle()
		for _, t := range order {
			if err := t.redial(ctx); err != nil {
				return nil, err
			}
		}
		n := min(roundsPerGeneration, rounds-done)
		for r := range warmRounds + n {
			shuffle()
			for _, t := range order {
				start := time.Now()
				if err := c(ctx, t.rt); err != nil {
					return nil, fmt.Errorf("%s: %w", t.name, err)
				}
				if r >= warmRounds {
					out[t.name] = append(out[t.name], time.Since(start))
				}
			}
		}
		done += n
	}
	return out, nil
}

// hammer runs clients concurrent callers of c on t's one client (the
// kubelet, too, has one connection), each starting calls while more says
// so, and returns the calls made. Callers stop starting calls rather than
// having them canceled, so no call fails for the clock's sake.
func hammer(ctx context.Context, t *target, c call, clients int, more func() bool) (int64, error) {
	var done atomic.Int64
	g, ctx := errgroup.WithContext(ctx)
	for range clients {
		g.Go(func() error {
			for more() {
				if err := c(ctx, t.rt); err != nil {
					return fmt.Errorf("%s: %w", t.name, err)
				}
				done.Add(1)
			}
			return nil
		})
	}
	err := g.Wait()
	return done.Load(), err
}

// quantile is the value at p (0 to 1) of ds, the lower of two where p
// falls between them.
func quantile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}
