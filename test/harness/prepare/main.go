// Command prepare installs or builds the runtime $RUNTIME selects (see harness.Runtime), as
// the harness would before starting it: `make runtime-bins`, a step of `make test` outside
// the tests' timeout, like `make kube-bins`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/crishim/crishim/test/harness"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := harness.RuntimeFromEnv()
	if err == nil {
		start := time.Now()
		if err = harness.Prepare(ctx, r); err == nil {
			fmt.Printf("runtime %s ready (%s)\n", r, time.Since(start).Round(time.Second))
			return
		}
	}
	fmt.Fprintln(os.Stderr, "prepare:", err)
	os.Exit(1)
}
