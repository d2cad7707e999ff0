package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Calls: where each latency call through a proxy spends its time, segment by
// segment, from the bench's own record of when each call began and ended
// (--call-log, on CLOCK_MONOTONIC) and a whole-machine trace taken on the
// same clock (perf record -k CLOCK_MONOTONIC). The bench makes one call at
// a time, so within a call's span the proxy's first read is the request
// arriving and its last write the answer leaving, whatever else the two
// proxies relay meanwhile (the pipe passes each peer's bandwidth probe on,
// crishim acks them itself). docs/performance.md has the commands.

// callLog records each latency call of a run: target, start, end.
type callLog struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

func openCallLog(path string) (*callLog, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--call-log: %w", err)
	}
	return &callLog{f: f, w: bufio.NewWriter(f)}, nil
}

// monoNow is CLOCK_MONOTONIC in ns, the clock perf's -k CLOCK_MONOTONIC
// stamps events with.
func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func (l *callLog) record(target string, start, end int64) {
	l.mu.Lock()
	fmt.Fprintf(l.w, "%s %d %d\n", target, start, end)
	l.mu.Unlock()
}

func (l *callLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.w.Flush(); err != nil {
		_ = l.f.Close()
		return fmt.Errorf("--call-log: %w", err)
	}
	return l.f.Close()
}

// loggedCall is one line of a call log, in seconds like perf's times.
type loggedCall struct {
	target     string
	start, end float64
}

// readCallLogFile reads the call log at path.
func readCallLogFile(path string) ([]loggedCall, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	calls, err := readCallLog(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return calls, nil
}

func readCallLog(r io.Reader) ([]loggedCall, error) {
	var out []loggedCall
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			return nil, fmt.Errorf("call log line %q: want TARGET START END", sc.Text())
		}
		s, err1 := strconv.ParseInt(f[1], 10, 64)
		e, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || e < s {
			return nil, fmt.Errorf("call log line %q: bad times", sc.Text())
		}
		out = append(out, loggedCall{target: f[0], start: float64(s) / 1e9, end: float64(e) / 1e9})
	}
	return out, sc.Err()
}

// callSegments names the parts of a call through a proxy, in order.
var callSegments = []string{
	"client to proxy's read", "proxy, request", "proxy's write to runtime's read", "runtime",
	"runtime's write to proxy's read", "proxy, answer", "proxy's write to client's end",
}

// ioEvent is the return of a read or a write that moved bytes.
type ioEvent struct {
	t     float64
	write bool
}

// segmentCalls returns, per target whose proxy is among procs (target
// name: pid), the segments of each of its logged calls that the trace
// shows whole: from the call's start to the proxy's first read, to its
// first write, the runtime's first read after it, the runtime's last write
// before the proxy's last read before its last write, that write, and the
// call's end.
func segmentCalls(r io.Reader, calls []loggedCall, procs map[string]int, runtime int) (map[string][][]time.Duration, error) {
	watched := map[int]bool{runtime: true}
	for _, pid := range procs {
		watched[pid] = true
	}
	entered := map[int]int{} // tid: the read or write it is in
	events := map[int][]ioEvent{}
	for ev, err := range perfEvents(r) {
		if err != nil {
			return nil, err
		}
		if !watched[ev.pid] {
			continue
		}
		switch ev.event {
		case "raw_syscalls:sys_enter":
			if nr, _, ok := ev.sysEnter(); ok {
				entered[ev.tid] = nr
			}
		case "raw_syscalls:sys_exit":
			nr, ret, ok := ev.sysExit()
			if ok && ret > 0 && (nr == sysRead || nr == sysWrite) && entered[ev.tid] == nr {
				events[ev.pid] = append(events[ev.pid], ioEvent{t: ev.t, write: nr == sysWrite})
			}
		}
	}
	// first returns the first event of es in (from, to) of the kind, last
	// the last; -1 if none.
	first := func(es []ioEvent, from, to float64, write bool) float64 {
		for i := sort.Search(len(es), func(i int) bool { return es[i].t > from }); i < len(es) && es[i].t < to; i++ {
			if es[i].write == write {
				return es[i].t
			}
		}
		return -1
	}
	last := func(es []ioEvent, from, to float64, write bool) float64 {
		for i := sort.Search(len(es), func(i int) bool { return es[i].t >= to }) - 1; i >= 0 && es[i].t > from; i-- {
			if es[i].write == write {
				return es[i].t
			}
		}
		return -1
	}
	out := map[string][][]time.Duration{}
	rt := events[runtime]
	for _, c := range calls {
		pid, ok := procs[c.target]
		if !ok {
			continue
		}
		px := events[pid]
		t1 := first(px, c.start, c.end, false)
		t2 := first(px, t1, c.end, true)
		t3 := first(rt, t2, c.end, false)
		t6 := last(px, t3, c.end, true)
		t5 := last(px, t3, t6, false)
		t4 := last(rt, t3, t5, true)
		if min(t1, t2, t3, t4, t5, t6) < 0 {
			continue
		}
		at := []float64{c.start, t1, t2, t3, t4, t5, t6, c.end}
		seg := make([]time.Duration, len(callSegments))
		for i := range seg {
			seg[i] = time.Duration((at[i+1] - at[i]) * 1e9)
		}
		out[c.target] = append(out[c.target], seg)
	}
	return out, nil
}

// printCalls prints each segment's p50, and the mean of its fastest 90%.
func printCalls(w io.Writer, res map[string][][]time.Duration) {
	names := make([]string, 0, len(res))
	for n := range res {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		calls := res[n]
		fmt.Fprintf(w, "calls through %s, %d whole in the trace: p50 (mean of the fastest 90%%) of each segment\n", n, len(calls))
		for i, name := range callSegments {
			ds := make([]time.Duration, len(calls))
			for j, c := range calls {
				ds[j] = c[i]
			}
			slices.Sort(ds)
			fast := ds[:max(1, len(ds)*9/10)]
			var sum time.Duration
			for _, d := range fast {
				sum += d
			}
			fmt.Fprintf(w, "  %-32s %6.1fµs (%.1fµs)\n", name, us(ds[len(ds)/2]), us(sum/time.Duration(len(fast))))
		}
	}
}
