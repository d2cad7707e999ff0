package harness

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"
)

// TestMain readies the runtime before any test starts: a cold containerd build takes
// minutes, far beyond a test's own context (make test runs `make runtime-bins` first, a
// bare `go test` may not have).
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() && os.Geteuid() == 0 && os.Getenv(helperEnv) == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		err := Prepare(ctx, "")
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "harness: prepare runtime:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}
