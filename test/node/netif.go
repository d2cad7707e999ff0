package node

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
)

// The kubelet refuses a loopback node IP, so each node gets an address on an interface the
// bed adds and removes: traffic to it never leaves the machine. Node n uses crishimnode<n>
// and 10.244.199.<n+1>, beside the harness slots' 10.244.200+ pod subnets. The interface is
// a bridge with no ports rather than a dummy: test machines' kernels may lack the dummy
// driver, but the bridge driver is there wherever CNI's bridge plugin works.
func nodeIface(index int) string { return fmt.Sprintf("crishimnode%d", index) }
func nodeIP(index int) string    { return fmt.Sprintf("10.244.199.%d", index+1) }

func addNodeIface(ctx context.Context, iface, addr string) error {
	_ = deleteLink(ctx, iface) // a leftover of an interrupted run
	for _, args := range [][]string{
		{"link", "add", iface, "type", "bridge"},
		{"addr", "add", addr + "/32", "dev", iface},
		{"link", "set", iface, "up"},
	} {
		if err := runIP(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// deleteLink removes iface; an interface that does not exist is no error.
func deleteLink(ctx context.Context, iface string) error {
	if _, err := net.InterfaceByName(iface); err != nil {
		return nil
	}
	return runIP(ctx, "link", "del", iface)
}

func runIP(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
