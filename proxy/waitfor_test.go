package proxy

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// waitFor waits until cond holds, and fails the test if it does not within
// hangBound. It waits for a state the code under test reaches (a stream
// held back, a goroutine parked), never for a length of time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, hangBound)
		}
		time.Sleep(time.Millisecond)
	}
}

// parkedIn says whether a goroutine is parked on the network poller
// ("IO wait") with fn on its stack.
func parkedIn(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "[IO wait") && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}
