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
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/crishim/crishim/test/node"
)

func main() {
	crishim := flag.String("crishim", "bin/crishim", "the crishim binary")
	clean := flag.Bool("clean", false, "remove the node and everything it started")
	args := flag.String("crishim-args", "", "extra crishim flags, space separated")
	buildOnly := flag.Bool("build-only", false, "only build (or find cached) the Kubernetes binaries")
	systemd := flag.Bool("systemd", false, "run the systemd node (test/node/systemd.go) with crishim from --deb")
	deb := flag.String("deb", "", "with --systemd: the crishim package to install (newest dist/crishim_*.deb if empty)")
	index := flag.Int("index", 0, "the node's index: 0 is make node's; with --systemd the default is 1")
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
	if *systemd {
		os.Exit(systemdNode(ctx, log, *clean, *index, *deb))
	}
	if *clean {
		if err := node.Clean(*index); err != nil {
			log.Error("node-clean", "err", err)
			os.Exit(1)
		}
		log.Info("node removed", "dir", node.Dir(*index))
		return
	}
	n, err := node.Up(ctx, node.Options{Index: *index, Crishim: *crishim, CrishimArgs: strings.Fields(*args), Log: log})
	if err != nil {
		log.Error("make node", "err", err)
		os.Exit(1)
	}
	log.Info("node Ready", "node", n.Name, "kubernetes", n.Version, "dir", n.Dir)
	for _, l := range n.Lines() {
		fmt.Println(l)
	}
}

// systemdNode is `make node SYSTEMD=1` and `make node-clean SYSTEMD=1`.
func systemdNode(ctx context.Context, log *slog.Logger, clean bool, index int, deb string) int {
	if index == 0 {
		index = 1
	}
	if clean {
		if err := node.CleanSystemd(index); err != nil {
			log.Error("node-clean", "err", err)
			return 1
		}
		log.Info("systemd node removed", "dir", node.SysnodeDir(index))
		return 0
	}
	if deb == "" {
		debs, _ := filepath.Glob("dist/crishim_*.deb")
		sort.Slice(debs, func(i, j int) bool { return modTime(debs[i]).After(modTime(debs[j])) })
		if len(debs) == 0 {
			log.Error("make node SYSTEMD=1: no dist/crishim_*.deb; run make deb")
			return 1
		}
		deb = debs[0]
	}
	n, err := node.StartSystemd(ctx, node.SystemdOptions{Index: index, Deb: deb, Log: log})
	if err != nil {
		log.Error("make node SYSTEMD=1", "err", err)
		return 1
	}
	log.Info("systemd node Ready", "node", n.Name, "kubernetes", n.Version, "dir", n.Dir)
	for _, l := range n.Lines() {
		fmt.Println(l)
	}
	return 0
}

func modTime(p string) time.Time {
	fi, err := os.Stat(p)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}
