package e2e

import (
	"github.com/crishim/crishim/shim"
	"github.com/crishim/crishim/test/harness"
)

// What the runtime behind crishim does by itself, by harness.Runtime, for the tests whose
// expectations depend on it: a test of crishim's `auto` expects what auto decides on the
// runtime at hand, and a test whose subject is emulation asks for it with
// --stop-signal-mode emulate (or --pid-target-mode emulate), which works on every containerd.

// runtimeHonoursStopSignal: containerd honours CRI stop_signal since 2.3, CRI-O since 1.33;
// Debian's containerd 1.6 accepts the field and ignores it.
func runtimeHonoursStopSignal() bool {
	return testbed.Runtime != harness.RuntimeContainerd16
}

// runtimeReportsStopSignal: whether the runtime's own ContainerStatus reports the
// stop_signal a container was created with. CRI-O honours the field but reports
// RUNTIME_DEFAULT.
func runtimeReportsStopSignal() bool {
	return testbed.Runtime == harness.RuntimeContainerd
}

// autoStopSignalMode is the mode crishim's `--stop-signal-mode auto` picks for the test
// bed's runtime: native where the runtime honours stop_signal, emulated where it does not.
func autoStopSignalMode() string {
	if runtimeHonoursStopSignal() {
		return shim.StopSignalNative
	}
	return shim.StopSignalEmulate
}
