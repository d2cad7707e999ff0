package shim

import (
	"context"
	"errors"
	"sync"
	"testing"
)

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
	var wg sync.WaitGroup
	inside := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := k.lock(ctx, "a")
			if err != nil {
				t.Error(err)
				return
			}
			inside++ // the race detector catches two holders at once
			unlock()
		}()
	}
	unlockA()
	wg.Wait()
	if inside != 8 {
		t.Errorf("%d holders, want 8", inside)
	}
	if len(k.locks) != 0 {
		t.Errorf("%d entries left after every holder released", len(k.locks))
	}
}
