package main

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/crishim/crishim/cmd/crishim/internal/hup"
)

// TestSIGHUPCaughtFromInit: the process catches SIGHUP from package init on,
// before serve runs: no test here calls signal.Notify, so without the
// handler the default action would kill this test binary.
func TestSIGHUPCaughtFromInit(t *testing.T) {
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hup.C:
	case <-time.After(30 * time.Second):
		t.Fatal("SIGHUP not delivered to hup.C")
	}
}
