package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/crishim/crishim/test/node"
)

// busybox is the bed's offline image, present on the node under this name.
const busybox = node.BusyboxLatest

// nodeIndex keeps the benchmark's node apart from `make node`'s (0) and the tests' (1...).
const nodeIndex = 9

type options struct {
	crishim  string
	pods     int
	turns    int
	churns   int
	steady   time.Duration
	cpBytes  int64
	keepNode bool
}

func main() {
	var o options
	flag.StringVar(&o.crishim, "crishim", "bin/crishim", "the crishim binary")
	flag.IntVar(&o.pods, "pods", 110, "pods per turn (the kubelet's default maximum is 110)")
	flag.IntVar(&o.turns, "turns", 2, "turns per side; the sides alternate, direct first")
	flag.IntVar(&o.churns, "churns", 3, "times per turn a tenth of the pods is deleted and replaced")
	flag.DurationVar(&o.steady, "steady", 30*time.Second, "steady state per turn, over which crishim's CPU and RSS are read")
	flag.Int64Var(&o.cpBytes, "cp-bytes", 1<<30, "bytes `kubectl cp` copies out of a pod per turn (0: none)")
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
	if o.pods < 1 || o.turns < 1 || o.churns < 0 || o.steady <= 0 || o.cpBytes < 0 {
		return fmt.Errorf("--pods and --turns must be positive, --churns and --cp-bytes not negative, --steady positive")
	}
	crishim, err := filepath.Abs(o.crishim)
	if err != nil {
		return err
	}
	n, err := node.Start(ctx, node.Options{Index: nodeIndex, Crishim: crishim, Log: log})
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
	sides := map[string]string{sideDirect: n.ContainerdEndpoint(), sideCrishim: n.CrishimEndpoint()}
	var turns []turn
	for i := range o.turns {
		for _, side := range []string{sideDirect, sideCrishim} {
			log.Info("turn", "n", i+1, "side", side)
			if err := n.PointKubelet(ctx, sides[side]); err != nil {
				return fmt.Errorf("point the kubelet at %s: %w", side, err)
			}
			t, err := runTurn(ctx, n, o, side, "bench-"+side+"-"+strconv.Itoa(i+1), log)
			if err != nil {
				return fmt.Errorf("%s turn %d: %w", side, i+1, err)
			}
			turns = append(turns, t)
		}
	}
	// The node's kubelet goes back to crishim, as `make node` leaves it.
	if err := n.PointKubelet(ctx, n.CrishimEndpoint()); err != nil {
		return err
	}
	printReport(os.Stdout, o, n, turns)
	return nil
}
