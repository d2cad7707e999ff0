package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/crishim/crishim/test/node"
)

// busybox is the bed's offline image, present on the node under this name.
const busybox = node.BusyboxLatest

// defaultNode keeps the benchmark's node apart from `make node`'s (0) and the tests' (1...);
// --node picks another, so that two checkouts can run it at once.
const defaultNode = 9

type options struct {
	crishim  string
	node     int
	pods     int
	turns    int
	maxTurns int
	churns   int
	steady   time.Duration
	cpBytes  int64
	keepNode bool
}

func main() {
	var o options
	flag.StringVar(&o.crishim, "crishim", "bin/crishim", "the crishim binary")
	flag.IntVar(&o.node, "node", defaultNode, "the test bed's node index (1-200; 0 is `make node`'s)")
	flag.IntVar(&o.pods, "pods", 5, "pods per turn: few enough that the machine does not queue (110 is the kubelet's maximum, for crishim's RSS)")
	flag.IntVar(&o.turns, "turns", 6, "pairs of turns (direct, then crishim) at least")
	flag.IntVar(&o.maxTurns, "max-turns", 20, "pairs of turns at most: after --turns, pairs are added until every kubelet-side ratio is resolved against ±2% or this many")
	flag.IntVar(&o.churns, "churns", 3, "times per turn a tenth of the pods (at least one) is deleted and replaced")
	flag.DurationVar(&o.steady, "steady", 10*time.Second, "steady state per turn, over which crishim's CPU and RSS are read")
	flag.Int64Var(&o.cpBytes, "cp-bytes", 64<<20, "bytes `kubectl cp` copies out of a pod per turn (0: none)")
	flag.BoolVar(&o.keepNode, "keep-node", false, "leave the node running at the end")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		log.Error("bench-node", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	if o.pods < 1 || o.turns < 1 || o.maxTurns < o.turns || o.churns < 0 || o.steady <= 0 || o.cpBytes < 0 {
		return fmt.Errorf("--pods and --turns must be positive, --max-turns at least --turns, --churns and --cp-bytes not negative, --steady positive")
	}
	if o.node < 1 || o.node > 200 {
		return fmt.Errorf("--node %d: want a node index from 1 to 200 (0 is `make node`'s)", o.node)
	}
	crishim, err := filepath.Abs(o.crishim)
	if err != nil {
		return err
	}
	n, err := node.Start(ctx, node.Options{Index: o.node, Crishim: crishim, Log: log})
	if err != nil {
		return fmt.Errorf("start the node: %w", err)
	}
	if !o.keepNode {
		defer func() {
			if err := n.Stop(); err != nil {
				log.Error("stop the node", "err", err)
			}
		}()
	}
	log.Info("node Ready", "node", n.Name, "kubernetes", n.Version, "runtime", n.Runtime)
	// The bed's node runs the notification controller's pods; they would take two of the
	// kubelet's 110 pods (maxPods), and --pods 110 would never all be Ready. The bench
	// measures the kubelet's CRI calls, not the controller: scale it to none.
	if out, err := n.Kubectl(ctx, nil, "-n", "crishim-system", "scale", "deployment/crishim-notification-controller", "--replicas=0"); err != nil {
		return fmt.Errorf("scale the notification controller to 0: %w: %s", err, out)
	}
	turns, err := runTurns(ctx, n, o, log)
	// The node's kubelet goes back to crishim, as `make node` leaves it.
	if perr := n.PointKubelet(ctx, n.CrishimEndpoint()); perr != nil && err == nil {
		err = perr
	}
	// A run that fails part way still reports the pairs it finished: they took long.
	if len(turns) >= 2 {
		printReport(os.Stdout, o, n, turns, runtime.NumCPU())
	}
	return err
}

// runTurns runs pairs of turns, direct then crishim: --turns of them, then more until every
// kubelet-side ratio is resolved or --max-turns ran. It returns the turns done so far with
// any error.
func runTurns(ctx context.Context, n *node.Node, o options, log *slog.Logger) ([]turn, error) {
	sides := map[string]string{sideDirect: n.ContainerdEndpoint(), sideCrishim: n.CrishimEndpoint()}
	var turns []turn
	for i := 0; i < o.maxTurns && (i < o.turns || !allResolved(turns)); i++ {
		for _, side := range []string{sideDirect, sideCrishim} {
			log.Info("turn", "n", i+1, "side", side)
			if err := n.PointKubelet(ctx, sides[side]); err != nil {
				return turns, fmt.Errorf("point the kubelet at %s: %w", side, err)
			}
			t, err := runTurn(ctx, n, o, side, "bench-"+side+"-"+strconv.Itoa(i+1), log)
			if err != nil {
				return turns, fmt.Errorf("%s turn %d: %w", side, i+1, err)
			}
			turns = append(turns, t)
		}
	}
	return turns, nil
}
