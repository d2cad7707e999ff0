package shim

import (
	"context"
	"sync"
)

// keyLock is a mutex per key (container ID) that a waiter can give up on
// when its context ends; with n > 1, a semaphore of n per key. Entries live
// only while someone holds or waits for them, so the map does not grow with
// the containers ever seen.
type keyLock struct {
	n     int // holders per key; 0 means 1
	mu    sync.Mutex
	locks map[string]*keyEntry
}

type keyEntry struct {
	sem  chan struct{} // one token: held by the lock owner
	refs int
}

// lock takes key's lock, or fails with ctx's error; call the returned
// function to release it.
func (k *keyLock) lock(ctx context.Context, key string) (func(), error) {
	return k.lockWait(ctx, key, nil)
}

// lockWait is lock, calling onWait (if not nil) when it has to wait.
func (k *keyLock) lockWait(ctx context.Context, key string, onWait func()) (func(), error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyEntry{sem: make(chan struct{}, max(1, k.n))}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()

	unlock := func() {
		<-e.sem
		k.release(key, e)
	}
	select {
	case e.sem <- struct{}{}:
		return unlock, nil
	default:
	}
	if onWait != nil {
		onWait()
	}
	select {
	case e.sem <- struct{}{}:
		return unlock, nil
	case <-ctx.Done():
		k.release(key, e)
		return nil, ctx.Err()
	}
}

func (k *keyLock) release(key string, e *keyEntry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e.refs--
	if e.refs == 0 {
		delete(k.locks, key)
	}
}
