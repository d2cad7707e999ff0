package sysinstall

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crishim/crishim/test/harness"
	"github.com/crishim/crishim/test/node"
)

// testNode is the systemd node, brought up without crishim.
var testNode *node.Node

// The two builds of the installer's image: the first installed, the second rolled out.
const (
	firstVersion  = "0.0.1~install1"
	secondVersion = "0.0.1~install2"
	firstRef      = "localhost/crishim/node-installer:install1"
	secondRef     = "localhost/crishim/node-installer:install2"
)

// repo is the checkout's root.
var repo string

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	v := os.Getenv("CRISHIM_INSTALLER_NODE")
	if v == "" {
		fmt.Println("sysinstall: skipped: set CRISHIM_INSTALLER_NODE=<index> (root) to run the fleet installer's tests on a systemd node")
		return 0
	}
	index, err := strconv.Atoi(v)
	if err != nil || index < 1 || index > node.SysnodeMaxIndex {
		fmt.Fprintf(os.Stderr, "sysinstall: CRISHIM_INSTALLER_NODE=%q: want 1 to %d\n", v, node.SysnodeMaxIndex)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sysinstall: go list -m:", err)
		return 1
	}
	repo = strings.TrimSpace(string(out))
	images := map[string][]byte{}
	for ref, version := range map[string]string{firstRef: firstVersion, secondRef: secondVersion} {
		if images[ref], err = harness.NodeInstallerImageArchive(ctx, repo, ref, version); err != nil {
			fmt.Fprintln(os.Stderr, "sysinstall:", err)
			return 1
		}
	}
	if err := node.CleanSystemd(index); err != nil {
		fmt.Fprintln(os.Stderr, "sysinstall: sweep:", err)
		return 1
	}
	before, err := node.HostState(index)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sysinstall:", err)
		return 1
	}
	start := time.Now()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	testNode, err = node.StartSystemd(ctx, node.SystemdOptions{Index: index, Direct: true, Log: log})
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, "sysinstall: start node:", err)
	} else {
		fmt.Printf("sysinstall: systemd node %s Ready in %s, kubelet -> containerd\n", testNode.Name, time.Since(start).Round(time.Millisecond))
		code = 0
		for ref, archive := range images {
			if err := testNode.ImportImage(ctx, archive); err != nil {
				fmt.Fprintf(os.Stderr, "sysinstall: import %s: %v\n", ref, err)
				code = 1
			}
		}
		if code == 0 {
			code = m.Run()
		}
	}
	if err := node.CleanSystemd(index); err != nil {
		fmt.Fprintln(os.Stderr, "sysinstall: teardown:", err)
		code = 1
	}
	// The node must leave the host's /sys and cgroup layout as it found them.
	after, err := node.HostState(index)
	if err != nil || after != before {
		fmt.Fprintf(os.Stderr, "sysinstall: FAIL: the host changed (%v):\nbefore:\n%s\nafter:\n%s\n", err, before, after)
		code = 1
	}
	return code
}
