package node

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sysnodeIndex is the systemd node these tests start, from $CRISHIM_SYSTEMD_NODE; the tests
// skip without it: they need root, Debian's mirror once (debootstrap) and a few minutes.
func sysnodeIndex(t *testing.T) int {
	t.Helper()
	v := os.Getenv("CRISHIM_SYSTEMD_NODE")
	if v == "" {
		t.Skip("set CRISHIM_SYSTEMD_NODE=<index> (root) to boot the systemd node")
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 1 || i > SysnodeMaxIndex {
		t.Fatalf("CRISHIM_SYSTEMD_NODE=%q: want 1 to %d", v, SysnodeMaxIndex)
	}
	return i
}

// TestSystemdNodeBoots boots the systemd node's namespaces alone: systemd as their PID 1
// answers running, sees its own cgroup root and /sys, and once the node is cleaned the
// host's /sys mounts and cgroup top levels are as before.
func TestSystemdNodeBoots(t *testing.T) {
	i := sysnodeIndex(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lower := os.Getenv("CRISHIM_SYSNODE_ROOTFS_EXPERIMENT")
	if lower == "" {
		var err error
		if lower, err = EnsureRootfs(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := CleanSystemd(i); err != nil {
		t.Fatal(err)
	}
	before, err := HostState(i)
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{l: layout{SysnodeDir(i)}}
	t.Cleanup(func() {
		if err := CleanSystemd(i); err != nil {
			t.Error(err)
		}
		if after, err := HostState(i); err != nil || after != before {
			t.Errorf("the host changed (%v):\nbefore:\n%s\nafter:\n%s", err, before, after)
		}
	})
	if err := n.boot(ctx, i, lower); err != nil {
		t.Fatal(err)
	}
	if got := n.SystemState(ctx); got != "running" {
		t.Fatalf("is-system-running = %q", got)
	}
	out, err := n.NodeExec(ctx, "sh", "-c", "echo pid1=$(cat /proc/1/comm); cat /proc/1/cgroup; findmnt -no FSTYPE,OPTIONS /sys | tr -s ' '")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("in the node:\n%s", out)
	for _, want := range []string{"pid1=systemd", ":name=systemd:/init.scope", "sysfs ro,"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("in the node: want %q in\n%s", want, out)
		}
	}
}
