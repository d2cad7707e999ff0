package warnlimit

import (
	"testing"
	"time"
)

func TestLimit(t *testing.T) {
	now := time.Unix(1000, 0)
	w := New(3, time.Minute, func() time.Time { return now })
	step := func(n int, wantLogged, wantSuppressed int) {
		t.Helper()
		logged, suppressed := 0, 0
		for range n {
			ok, s := w.Allow()
			if ok {
				logged++
			}
			suppressed += s
		}
		if logged != wantLogged || suppressed != wantSuppressed {
			t.Errorf("%d warnings: %d logged, %d reported suppressed; want %d, %d", n, logged, suppressed, wantLogged, wantSuppressed)
		}
	}
	step(10, 3, 0) // the burst, then 7 left out
	now = now.Add(59 * time.Second)
	step(1, 0, 0) // same interval: 8 left out
	now = now.Add(time.Second)
	step(5, 3, 8) // a new interval: the first says 8 were left out
	now = now.Add(time.Hour)
	step(1, 1, 2)
	step(1, 1, 0)
}
