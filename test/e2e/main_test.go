package e2e

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/crishim/crishim/test/crishimproc"
	"github.com/crishim/crishim/test/harness"
)

var (
	// testbed is the private runtime ($RUNTIME) shared by the tests of this package.
	testbed *harness.Containerd
	// binDir holds the crishim and crishimctl binaries built for this run.
	binDir string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	// cri-client logs every failed call through klog; the tests check the
	// errors themselves, and the noise would bury real failures.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	if testing.Short() {
		fmt.Println("e2e: skipped in -short mode")
		return 0
	}
	if os.Geteuid() != 0 {
		// A silent skip would print "ok" for tests that never ran: fail, and
		// say how to run them or how to leave them out.
		fmt.Fprintln(os.Stderr, "e2e: FAIL: end-to-end tests start a private runtime and need root: run `sudo make test`, or `make unit` (-short) to leave them out")
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "crishim-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	if err := crishimproc.Build(ctx, dir); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	start := time.Now()
	testbed, err = harness.Start(ctx, harness.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: start private runtime:", err)
		return 1
	}
	fmt.Printf("e2e: private %s (%s %s) in %s up in %s (slot %d, %s)\n", testbed.Runtime, testbed.RuntimeName, testbed.RuntimeVersion,
		testbed.Dir, time.Since(start).Round(time.Millisecond), testbed.Slot, testbed.Endpoint)
	code := m.Run()
	if err := testbed.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: teardown:", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
