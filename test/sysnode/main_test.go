package sysnode

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/crishim/crishim/test/node"
)

// testNode is the systemd node the tests of this package share.
var testNode *node.Node

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	v := os.Getenv("CRISHIM_SYSTEMD_NODE")
	if v == "" {
		fmt.Println("sysnode: skipped: set CRISHIM_SYSTEMD_NODE=<index> (root) to run the tests on the systemd node")
		return 0
	}
	index, err := strconv.Atoi(v)
	if err != nil || index < 1 || index > node.SysnodeMaxIndex {
		fmt.Fprintf(os.Stderr, "sysnode: CRISHIM_SYSTEMD_NODE=%q: want 1 to %d\n", v, node.SysnodeMaxIndex)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	deb, cleanup, err := buildDeb(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sysnode:", err)
		return 1
	}
	defer cleanup()
	if err := node.CleanSystemd(index); err != nil {
		fmt.Fprintln(os.Stderr, "sysnode: sweep:", err)
		return 1
	}
	before, err := node.HostState(index)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sysnode:", err)
		return 1
	}
	start := time.Now()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	testNode, err = node.StartSystemd(ctx, node.SystemdOptions{Index: index, Deb: deb, Log: log})
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, "sysnode: start node:", err)
	} else {
		fmt.Printf("sysnode: systemd node %s Ready in %s, kubelet -> crishim %s\n", testNode.Name, time.Since(start).Round(time.Millisecond), testNode.CrishimSock)
		code = m.Run()
	}
	if err := node.CleanSystemd(index); err != nil {
		fmt.Fprintln(os.Stderr, "sysnode: teardown:", err)
		code = 1
	}
	// The node must leave the host's /sys and cgroup layout as it found them.
	after, err := node.HostState(index)
	if err != nil || after != before {
		fmt.Fprintf(os.Stderr, "sysnode: FAIL: the host changed (%v):\nbefore:\n%s\nafter:\n%s\n", err, before, after)
		code = 1
	}
	return code
}

// buildDeb builds the package as `make deb` does, into a directory of its own.
func buildDeb(ctx context.Context) (string, func(), error) {
	dir, err := os.MkdirTemp("", "crishim-sysnode-deb-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	root, err := repoRoot()
	if err != nil {
		return "", cleanup, err
	}
	cmd := exec.CommandContext(ctx, "make", "-C", root, "deb", "DIST="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", cleanup, fmt.Errorf("make deb: %w\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "crishim_*.deb"))
	if len(debs) != 1 {
		return "", cleanup, fmt.Errorf("make deb made %v", debs)
	}
	return debs[0], cleanup, nil
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m: %w", err)
	}
	return string(out[:len(out)-1]), nil
}
