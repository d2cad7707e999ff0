package proxy

import "sync"

// checkLocks turns on mustHold; the package's tests set it (x/net's http2
// server does the same with its goroutine checks, on in its tests only).
// Off, mustHold is one predictable branch.
var checkLocks = false

// mustHold panics if mu is free when the caller says it holds it. TryLock
// succeeds only on a free mutex, so a missing lock is caught whenever no
// other goroutine happens to hold mu, and a held one never trips it.
func mustHold(mu *sync.Mutex, what string) {
	if checkLocks && mu.TryLock() {
		mu.Unlock()
		panic("proxy: " + what + " is not held")
	}
}
