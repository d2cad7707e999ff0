package main

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// Wakes: a proxy's write to a socket wakes the thread waiting to read the
// other end (the runtime's for a request, the client's for an answer).
// How long until that thread runs is the write's share of the call's path,
// and where the scheduler puts it decides what else is: woken onto the
// proxy's own CPU, it runs once the proxy sleeps (a unix socket's wake-up
// is a synchronous one, which asks the scheduler for just that), so
// whatever the proxy does after the write delays it; woken onto the other
// CPU, it waits for that CPU to come out of idle. From a whole-machine trace
// that has sched:sched_wakeup too (perf record -a); docs/performance.md has
// the commands.

// wokenUp matches sched:sched_wakeup's trace: the thread woken.
var wokenUp = regexp.MustCompile(`\bpid=(\d+) `)

// wakeSource is a process and the socket it wrote.
type wakeSource struct{ pid, fd int }

// wake is one write's wake-up: whether the woken thread ran on the writer's
// CPU, and how long after the write returned.
type wake struct {
	sameCPU bool
	delay   time.Duration
}

// woken reads a sched:sched_wakeup event: the thread it wakes.
func (ev perfEvent) woken() (tid int, ok bool) {
	m := wokenUp.FindStringSubmatch(ev.rest)
	if m == nil {
		return 0, false
	}
	tid, _ = strconv.Atoi(m[1])
	return tid, true
}

// wakes reads a whole-machine trace and returns, per socket the given
// processes write, the wake-ups their writes caused: the first thread of
// another process each write woke, until it was switched in.
func wakes(r io.Reader, pids map[int]bool) (map[wakeSource][]wake, error) {
	type waiting struct {
		src wakeSource
		at  float64
		cpu int
	}
	ours := map[int]bool{}     // threads of the given processes
	writing := map[int]int{}   // tid: fd of its write in progress
	woke := map[int]int{}      // writer's tid: the thread its write woke
	waits := map[int]waiting{} // woken tid: the write that woke it
	out := map[wakeSource][]wake{}
	for ev, err := range perfEvents(r) {
		if err != nil {
			return nil, err
		}
		if pids[ev.pid] {
			ours[ev.tid] = true
		}
		switch ev.event {
		case "raw_syscalls:sys_enter":
			if nr, fd, ok := ev.sysEnter(); ok && nr == sysWrite && pids[ev.pid] {
				writing[ev.tid] = fd
				delete(woke, ev.tid)
			}
		case "sched:sched_wakeup":
			if _, ok := writing[ev.tid]; !ok {
				continue
			}
			if _, ok := woke[ev.tid]; ok {
				continue
			}
			if tid, ok := ev.woken(); ok && !ours[tid] {
				woke[ev.tid] = tid
			}
		case "raw_syscalls:sys_exit":
			fd, ok := writing[ev.tid]
			if nr, _, exited := ev.sysExit(); !ok || !exited || nr != sysWrite {
				continue
			}
			delete(writing, ev.tid)
			if tid, ok := woke[ev.tid]; ok {
				delete(woke, ev.tid)
				waits[tid] = waiting{src: wakeSource{ev.pid, fd}, at: ev.t, cpu: ev.cpu}
			}
		case "sched:sched_switch":
			_, _, next, ok := ev.switched()
			w, waited := waits[next]
			if !ok || !waited {
				continue
			}
			delete(waits, next)
			out[w.src] = append(out[w.src], wake{sameCPU: ev.cpu == w.cpu, delay: time.Duration((ev.t - w.at) * 1e9)})
		}
	}
	return out, nil
}

// printWakes prints, per socket written often enough to matter, how many
// of the wake-ups went to the writer's CPU and the p50 delay each way.
func printWakes(w io.Writer, res map[wakeSource][]wake, names map[int]string) {
	srcs := frequent(res, func(s wakeSource) string { return fmt.Sprint(names[s.pid], s.fd) })
	if len(srcs) == 0 {
		return
	}
	fmt.Fprintln(w, "wake-ups of the reader at the other end, from the write's return to its switch-in:")
	for _, s := range srcs {
		var same, other []time.Duration
		for _, wk := range res[s] {
			if wk.sameCPU {
				same = append(same, wk.delay)
			} else {
				other = append(other, wk.delay)
			}
		}
		fmt.Fprintf(w, "%s (pid %d) writes to fd %d: %d on its CPU (%.0f%%), p50 %s; %d on the other, p50 %s\n",
			names[s.pid], s.pid, s.fd, len(same), 100*float64(len(same))/float64(len(res[s])), p50us(same), len(other), p50us(other))
	}
}

// p50us formats the median of ds in µs, or "-" if there is none.
func p50us(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return fmt.Sprintf("%.1fµs", us(ds[len(ds)/2]))
}
