// Package warnlimit rate-limits warnings of one kind, as the kernel's
// printk rate limit: a burst per interval is logged, the rest only
// counted, and the next warning logged says how many were left out. A
// cause that repeats (a full disk under load, a hostile peer reconnecting
// in a loop) must not flood the journal with one line each; a metric
// counts every one.
package warnlimit

import (
	"sync"
	"time"
)

// Limit decides which warnings of one kind are logged. A nil *Limit logs
// all.
type Limit struct {
	burst    int
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	start      time.Time // of the current interval
	logged     int       // in the current interval
	suppressed int       // since the last warning logged
}

// New logs burst warnings per interval; now is the clock (nil: time.Now).
func New(burst int, interval time.Duration, now func() time.Time) *Limit {
	if now == nil {
		now = time.Now
	}
	return &Limit{burst: burst, interval: interval, now: now}
}

// Allow says whether to log this warning, and, when it is, how many were
// suppressed before it (to be said first).
func (w *Limit) Allow() (ok bool, suppressed int) {
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

// Burst is how many warnings an interval logs.
func (w *Limit) Burst() int { return w.burst }

// Interval is the interval Burst is counted in.
func (w *Limit) Interval() time.Duration { return w.interval }
