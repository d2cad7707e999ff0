package shim

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
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

func TestKeyLock(t *testing.T) {
	var k keyLock
	ctx := context.Background()
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
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := k.lock(cctx, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("lock of a held key with a canceled context: %v", err)
	}

	// Waiters get the lock one at a time, in some order, after the owner.
	// holders counts who is inside: a second holder at once is the bug.
	var holders atomic.Int32
	holders.Add(1) // this goroutine, holding "a"
	var wg sync.WaitGroup
	entered := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := k.lock(ctx, "a")
			if err != nil {
				t.Error(err)
				return
			}
			if n := holders.Add(1); n != 1 {
				t.Errorf("%d holders of one key at once", n)
			}
			entered++
			runtime.Gosched() // give a wrongly admitted second holder its chance
			holders.Add(-1)
			unlock()
		}()
	}
	// Release only once all eight wait on the key, so that a lock that
	// admitted them while it is held is caught above.
	for k.waiting("a") != 9 {
		runtime.Gosched()
	}
	holders.Add(-1)
	unlockA()
	wg.Wait()
	if entered != 8 {
		t.Errorf("%d holders, want 8", entered)
	}
	if len(k.locks) != 0 {
		t.Errorf("%d entries left after every holder released", len(k.locks))
	}
}
