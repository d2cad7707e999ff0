// Command up is `make node` and `make node-clean`: it brings up the one-node cluster of
// test/node with crishim built from the checkout, or removes it. On success it prints one
// line each of KUBECONFIG=, CRISHIM_SOCK= and CRISHIM_METRICS=, and nothing else on stdout:
// other tools read those lines.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/crishim/crishim/test/node"
)

func main() {
	crishim := flag.String("crishim", "bin/crishim", "the crishim binary")
	clean := flag.Bool("clean", false, "remove the node and everything it started")
	args := flag.String("crishim-args", "", "extra crishim flags, space separated")
	buildOnly := flag.Bool("build-only", false, "only build (or find cached) the Kubernetes binaries")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *buildOnly {
		b, err := node.EnsureBinaries(ctx, log)
		if err != nil {
			log.Error("kube-bins", "err", err)
			os.Exit(1)
		}
		log.Info("Kubernetes binaries ready", "version", b.Version, "dir", b.Dir)
		return
	}
	if *clean {
		if err := node.Clean(0); err != nil {
			log.Error("node-clean", "err", err)
			os.Exit(1)
		}
		log.Info("node removed", "dir", node.Dir(0))
		return
	}
	n, err := node.Up(ctx, node.Options{Index: 0, Crishim: *crishim, CrishimArgs: strings.Fields(*args), Log: log})
	if err != nil {
		log.Error("make node", "err", err)
		os.Exit(1)
	}
	log.Info("node Ready", "node", n.Name, "kubernetes", n.Version, "dir", n.Dir)
	for _, l := range n.Lines() {
		fmt.Println(l)
	}
}
