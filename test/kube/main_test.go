package kube

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/crishim/crishim/test/crishimproc"
	"github.com/crishim/crishim/test/node"
)

var (
	// testNode is the one-node cluster shared by the tests of this package.
	testNode *node.Node
	// binDir holds the crishim and crishimctl binaries built for this run.
	binDir string
)

// nodeIndex keeps this package's node apart from `make node`'s (index 0);
// $CRISHIM_KUBE_NODE picks another, so that two checkouts can run this
// package at once on one machine.
var nodeIndex = 1

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("kube: skipped in -short mode")
		return 0
	}
	if v := os.Getenv("CRISHIM_KUBE_NODE"); v != "" {
		i, err := strconv.Atoi(v)
		if err != nil || i < 1 || i > 200 {
			fmt.Fprintf(os.Stderr, "kube: CRISHIM_KUBE_NODE=%q: want a node index from 1 to 200 (0 is `make node`'s)\n", v)
			return 2
		}
		nodeIndex = i
	}
	if os.Geteuid() != 0 {
		// A silent skip would print "ok" for tests that never ran: fail, and
		// say how to run them or how to leave them out.
		fmt.Fprintln(os.Stderr, "kube: FAIL: the node tests start a runtime, a kubelet and a control plane and need root: run `sudo make test`, or `make unit` (-short) to leave them out")
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "crishim-kube-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	if err := crishimproc.Build(ctx, dir); err != nil {
		fmt.Fprintf(os.Stderr, "kube: %v\n", err)
		return 1
	}
	start := time.Now()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	testNode, err = node.Start(ctx, node.Options{Index: nodeIndex, Crishim: filepath.Join(dir, "crishim"), Log: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube: start node:", err)
		if cerr := node.Clean(nodeIndex); cerr != nil {
			fmt.Fprintln(os.Stderr, "kube: clean:", cerr)
		}
		return 1
	}
	fmt.Printf("kube: node %s (Kubernetes %s, runtime %s) Ready in %s, kubelet -> crishim %s\n", testNode.Name, testNode.Version, testNode.Runtime,
		time.Since(start).Round(time.Millisecond), testNode.CrishimSock)
	code := m.Run()
	if err := testNode.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "kube: teardown:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
