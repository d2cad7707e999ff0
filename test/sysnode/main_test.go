package sysnode

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	dir, err := os.MkdirTemp("", "crishim-sysnode-deb-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "sysnode:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	debDir = dir
	deb, err := buildDeb(ctx, firstVersion)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sysnode:", err)
		return 1
	}
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

// The versions of the packages the tests install: the first at the start, the second as an
// upgrade (Debian orders them so).
const (
	firstVersion   = "0.0.1~sysnode1"
	upgradeVersion = "0.0.1~sysnode2"
)

// debDir holds the packages built for this run.
var debDir string

// buildDeb builds the package of version as `make deb` does, into debDir.
func buildDeb(ctx context.Context, version string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "make", "-C", root, "deb", "DIST="+debDir, "DEB_VERSION="+version)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("make deb: %w\n%s", err, out)
	}
	deb := filepath.Join(debDir, "crishim_"+version+"_"+runtime.GOARCH+".deb")
	if _, err := os.Stat(deb); err != nil {
		return "", fmt.Errorf("make deb: %w", err)
	}
	return deb, nil
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m: %w", err)
	}
	return string(out[:len(out)-1]), nil
}
