package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// showTarget runs a debug container next to the app, as `kubectl debug
// --target` would, and shows that it sees the app's processes.
func showTarget(ctx context.Context, ctlBin, endpoint, appID string) error {
	say("crishimctl debug --target app -- ps: a debug container sharing the app's PID namespace (CRI TARGET)")
	cmd := exec.CommandContext(ctx, ctlBin, "--endpoint", endpoint, "--timeout", "30s",
		"debug", "--target", appID, "--", "ps", "-o", "pid,args")
	out, err := cmd.CombinedOutput()
	fmt.Print(indent(string(out)))
	if err != nil {
		return fmt.Errorf("crishimctl debug: %w", err)
	}
	if !strings.Contains(string(out), "sleep 3600") {
		return fmt.Errorf("the debug container does not see the app's sleep")
	}
	detail("the app's sleep is listed: the debug container shares the app's PID namespace")
	return nil
}
