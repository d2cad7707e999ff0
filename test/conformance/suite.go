package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// skippedSpecs are critest specs left out of both runs, as ginkgo regular expressions; each
// needs something the test bed does not give, so it could only fail, both ways.
var skippedSpecs = []string{
	// Pulls gcr.io/k8s-staging-cri-tools/test-image-digest@sha256:9700f9a2…: a digest names
	// upstream bytes, which no offline build reproduces (images.go).
	`public image with digest should be pulled and removed`,
	// Reaches a pod through host port 12000, which needs the CNI portmap plugin; the
	// harness's network has none, to keep iptables rules out of the test bed.
	`port mapping with host port and container port`,
}

// runCritest runs critest against one CRI endpoint (runtime and image service alike) and
// reads its report; focus, when set, is ginkgo's -focus. name names the files in dir:
// critest-<name>.json (ginkgo's report) and critest-<name>.log (critest's output). Failed specs
// make critest exit non-zero; that is the report's business, so only a missing report is an
// error.
func runCritest(ctx context.Context, critest, endpoint, focus, dir, name string) (suiteResult, error) {
	report := filepath.Join(dir, "critest-"+name+".json")
	logPath := filepath.Join(dir, "critest-"+name+".log")
	_ = os.Remove(report)
	logFile, err := os.Create(logPath)
	if err != nil {
		return suiteResult{}, fmt.Errorf("critest log: %w", err)
	}
	defer logFile.Close()
	args := []string{
		"-runtime-endpoint=" + endpoint,
		"-image-endpoint=" + endpoint,
		// Never the machine's /etc/crictl.yaml, which critest reads otherwise.
		"-config=" + filepath.Join(dir, "no-crictl.yaml"),
		"-ginkgo.json-report=" + report,
		"-ginkgo.no-color",
		"-ginkgo.v",
		// The whole suite takes minutes; ginkgo's default of one hour would cut a slow,
		// loaded machine's run short, and a hang is still cut by this one.
		"-ginkgo.timeout=3h",
	}
	if focus != "" {
		args = append(args, "-ginkgo.focus="+focus)
	}
	if len(skippedSpecs) > 0 {
		args = append(args, "-ginkgo.skip="+strings.Join(skippedSpecs, "|"))
	}
	cmd := exec.CommandContext(ctx, critest, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// critest dies with us; its pods are swept with the runtime's slot.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return suiteResult{}, fmt.Errorf("critest against %s: %w", endpoint, ctx.Err())
	}
	res, err := readReport(report)
	if err != nil {
		var exit *exec.ExitError
		if runErr != nil && !errors.As(runErr, &exit) {
			err = runErr
		}
		return suiteResult{}, fmt.Errorf("critest against %s (log %s): %w", endpoint, logPath, err)
	}
	return res, nil
}
