package shim

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// waiting is how many hold or wait for key.
func (k *keyLock) waiting(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e := k.locks[key]; e != nil {
		return e.refs
	}
	return 0
}

// TestKeyLock runs in a synctest bubble: a lock that admits a second
// holder, or never hands the key on, fails at once with its message instead
// of spinning or blocking until the test binary's timeout.
func TestKeyLock(t *testing.T) {
	synctest.Test(t, testKeyLock)
}

func testKeyLock(t *testing.T) {
	var k keyLock
	// A waiter that never gets the key ends with this context's error: in
	// the bubble its minute passes as soon as everything else is blocked.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	unlockA, err := k.lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// Another key is not blocked.
	unlockB, err := k.lock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	unlockB()

	// A waiter on a held key gives up with its context.
	cctx, cancelC := context.WithCancel(ctx)
	cancelC()
	if _, err := k.lock(cctx, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("lock of a held key with a canceled context: %v", err)
	}

	// Waiters get the lock one at a time, in some order, after the owner.
	// holders counts who is inside: a second holder at once is the bug.
	var holders atomic.Int32
	holders.Add(1) // this goroutine, holding "a"
	var wg sync.WaitGroup
	var entered atomic.Int32
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := k.lock(ctx, "a")
			if err != nil {
				t.Errorf("a waiter never got the key: %v", err)
				return
			}
			if n := holders.Add(1); n != 1 {
				t.Errorf("%d holders of one key at once", n)
			}
			entered.Add(1)
			runtime.Gosched() // give a wrongly admitted second holder its chance
			holders.Add(-1)
			unlock()
		}()
	}
	// Release only once all eight wait on the key, so that a lock that
	// admitted them while it is held is caught above.
	synctest.Wait()
	if n := k.waiting("a"); n != 9 {
		t.Errorf("%d hold or wait for the key, want the owner and 8 waiters", n)
	}
	holders.Add(-1)
	unlockA()
	wg.Wait()
	if n := entered.Load(); n != 8 {
		t.Errorf("%d holders, want 8", n)
	}
	if len(k.locks) != 0 {
		t.Errorf("%d entries left after every holder released", len(k.locks))
	}
}
