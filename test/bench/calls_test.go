package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// A call's segments run from its logged start to the proxy's first read,
// its first write after, the runtime's first read after that, the
// runtime's last write before the proxy's last read before its last write,
// and the logged end: what the proxy relays in between (a probe passed on)
// does not move them. Calls through a target not named, or not whole in
// the trace, are left out.
func TestCallSegments(t *testing.T) {
	var b strings.Builder
	io := func(pid, tid int, at float64, nr, fd, ret int) {
		fmt.Fprintf(&b, " p %d/%d [000] %.9f: raw_syscalls:sys_enter: NR %d (%x, 0, 0, 0, 0, 0)\n", pid, tid, at-0.0000005, nr, fd)
		fmt.Fprintf(&b, " p %d/%d [000] %.9f: raw_syscalls:sys_exit: NR %d = %d\n", pid, tid, at, nr, ret)
	}
	const proxy, runtime = 10, 20
	io(proxy, 11, 100.000020, 0, 13, 30)   // the request arrives
	io(proxy, 11, 100.000025, 1, 14, 30)   // and leaves
	io(runtime, 21, 100.000040, 0, 5, 30)  // the runtime reads it
	io(runtime, 21, 100.000050, 1, 5, 17)  // and sends a probe
	io(proxy, 12, 100.000060, 0, 14, 17)   // which the proxy passes on
	io(proxy, 12, 100.000062, 1, 13, 17)   //
	io(runtime, 21, 100.000070, 0, 5, -11) // a read that finds nothing
	io(runtime, 21, 100.000120, 1, 5, 101) // the answer
	io(proxy, 12, 100.000130, 0, 14, 101)
	io(proxy, 12, 100.000135, 1, 13, 101)
	io(proxy, 11, 100.000320, 0, 13, 30) // a call with no runtime in it
	io(proxy, 11, 100.000325, 1, 14, 30)
	calls := []loggedCall{
		{target: "proxy", start: 100.000000, end: 100.000200},
		{target: "direct", start: 100.000210, end: 100.000290},
		{target: "proxy", start: 100.000300, end: 100.000400},
	}
	res, err := segmentCalls(strings.NewReader(b.String()), calls, map[string]int{"proxy": proxy}, runtime)
	if err != nil {
		t.Fatal(err)
	}
	us := func(n float64) time.Duration { return time.Duration(n * 1000) }
	want := map[string][][]time.Duration{"proxy": {{us(20), us(5), us(15), us(80), us(10), us(5), us(65)}}}
	checkPerKey(t, res, want, func(a, b []time.Duration) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if !within1ns(a[i], b[i]) {
				return false
			}
		}
		return true
	})
}

// The call log the bench writes is the one --residence reads.
func TestCallLogRoundTrip(t *testing.T) {
	path := t.TempDir() + "/calls"
	l, err := openCallLog(path)
	if err != nil {
		t.Fatal(err)
	}
	l.record("crishim", 100_000_000_000, 100_000_150_000)
	l.record("pipe", 100_000_200_000, 100_000_300_000)
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	got, err := readCallLogFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []loggedCall{{"crishim", 100, 100.00015}, {"pipe", 100.0002, 100.0003}}
	if len(got) != len(want) {
		t.Fatalf("calls %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].target != want[i].target || math.Abs(got[i].start-want[i].start) > 1e-9 || math.Abs(got[i].end-want[i].end) > 1e-9 {
			t.Errorf("call %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
