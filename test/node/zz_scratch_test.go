package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestScratchDeb(t *testing.T) {
	i := sysnodeIndex(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lower, err := EnsureRootfs(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := CleanSystemd(i); err != nil {
		t.Fatal(err)
	}
	n := &Node{l: layout{SysnodeDir(i)}}
	if err := n.boot(ctx, i, lower); err != nil {
		t.Fatal(err)
	}
	if err := n.installContainerd(ctx, "/var/tmp/crishim-testbed/containerd-bin/v2.4.2-b1d14504766b"); err != nil {
		t.Fatal(err)
	}
	debs, _ := filepath.Glob("../../dist/crishim_*.deb")
	if err := n.installCrishimDeb(ctx, debs[0]); err != nil {
		t.Fatal(err)
	}
	out, _ := n.NodeExec(ctx, "sh", "-c", "systemctl status containerd --no-pager; ctr -n k8s.io images ls -q; journalctl -u crishim --no-pager | tail -3; systemctl is-system-running; systemctl --failed")
	t.Logf("%s", out)
	if os.Getenv("KEEP") == "" {
		CleanSystemd(i)
	}
}
