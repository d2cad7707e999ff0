package e2e

import (
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

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

// createdStateAfterTargetStops is the state of a created, never started debug
// container whose target's PID namespace went away. containerd makes the
// container's process at StartContainer, so the container stays CREATED. CRI-O
// makes it at CreateContainer (runc create), inside the target's PID namespace,
// where it is killed with the namespace's init: the container ends EXITED.
func createdStateAfterTargetStops() runtimeapi.ContainerState {
	if testbed.Runtime == harness.RuntimeCRIO {
		return runtimeapi.ContainerState_CONTAINER_EXITED
	}
	return runtimeapi.ContainerState_CONTAINER_CREATED
}

// neverStarted: the container's status says it was never started. containerd
// leaves started_at 0; CRI-O sends its zero time.Time as Unix nanoseconds.
func neverStarted(st *runtimeapi.ContainerStatus) bool {
	return st.GetStartedAt() == 0 || st.GetStartedAt() == (time.Time{}).UnixNano()
}

// needContainerdAPI skips a test or subtest whose subject is what crishim does
// through the containerd API (--stop-signal-mode emulate, --pid-target-mode
// emulate, delivery via containerd): crishim refuses those modes without it, and
// CRI-O has no containerd API to give it.
func needContainerdAPI(t *testing.T) {
	t.Helper()
	if testbed.ContainerdAddress == "" {
		t.Skipf("needs the containerd API, which %s %s does not have", testbed.RuntimeName, testbed.RuntimeVersion)
	}
}

// signalVia is how a crishim started by startCrishim delivers a signal: through
// the containerd API where the runtime has one, else through a pidfd.
func signalVia() string {
	if testbed.ContainerdAddress == "" {
		return "pidfd"
	}
	return "containerd"
}
