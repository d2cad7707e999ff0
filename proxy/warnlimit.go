package proxy

import (
	"sync"
	"time"
)

// Protocol error warnings are rate-limited: a peer that keeps making them (a
// broken or hostile client reconnecting in a loop) must not flood the journal
// with one line each. The first warnBurst of each warnInterval are logged;
// the rest are only counted (crishim_relay_protocol_errors_total counts every
// one), and the next warning logged says how many were left out. Ten a minute
// is more than any working client makes and few enough to read.
const (
	warnBurst    = 10
	warnInterval = time.Minute
)

// warnLimit decides which warnings of one kind are logged, as the kernel's
// printk rate limit: a burst per interval, then a count of the suppressed.
type warnLimit struct {
	burst    int
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	start      time.Time // of the current interval
	logged     int       // in the current interval
	suppressed int       // since the last warning logged
}

func newWarnLimit(burst int, interval time.Duration, now func() time.Time) *warnLimit {
	if now == nil {
		now = time.Now
	}
	return &warnLimit{burst: burst, interval: interval, now: now}
}

// allow says whether to log this warning, and, when it is, how many were
// suppressed before it (to be said first).
func (w *warnLimit) allow() (ok bool, suppressed int) {
	if w == nil {
		return true, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if t := w.now(); w.start.IsZero() || t.Sub(w.start) >= w.interval {
		w.start, w.logged = t, 0
	}
	if w.logged >= w.burst {
		w.suppressed++
		return false, 0
	}
	w.logged++
	suppressed, w.suppressed = w.suppressed, 0
	return true, suppressed
}
