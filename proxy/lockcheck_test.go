package proxy

import (
	"sync"
	"testing"
)

func init() { checkLocks = true }

// TestMustHoldCatchesAFreeLock: the check fires on a mutex no one holds
// and not on a held one.
func TestMustHoldCatchesAFreeLock(t *testing.T) {
	var mu sync.Mutex
	mu.Lock()
	mustHold(&mu, "mu") // held: no panic
	mu.Unlock()
	defer func() {
		if recover() == nil {
			t.Fatal("mustHold let a free mutex pass")
		}
	}()
	mustHold(&mu, "mu")
}
