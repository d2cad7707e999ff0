package main

import (
	"bufio"
	"fmt"
	"io"
	"iter"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Residence: how long a proxy holds a call's bytes, from the read that
// brings them in to the write that passes them on, taken from a kernel
// trace of its system calls. It is the proxy's own time on the call's path,
// without the wake-ups around it (which the latency columns include and
// the scheduler decides), so that two builds can be compared one
// microsecond at a time on a noisy machine. docs/performance.md has the
// perf command that writes the trace.

// The numbers of read(2) and write(2) on x86-64, as raw_syscalls report
// them.
const sysRead, sysWrite = 0, 1

// perfLine matches `perf script --ns -F comm,pid,tid,cpu,time,event,trace`.
var perfLine = regexp.MustCompile(`^\s*(.+?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s+(.*)$`)

var (
	sysEnter = regexp.MustCompile(`^NR (\d+) \(([0-9a-f]+)`)
	sysExit  = regexp.MustCompile(`^NR (\d+) = (-?\d+)`)
	switched = regexp.MustCompile(`prev_pid=(\d+) .*prev_state=(\S+) ==> .*next_pid=(\d+)`)
)

// hop is one direction through one proxy: the socket read and the socket
// written.
type hop struct {
	pid           int
	readFD, wrtFD int
}

type window struct {
	start    float64
	fd       int
	switched bool // the thread was switched out in between
}

// residence reads a trace and returns, per hop of the given processes,
// the residence times of the windows in which the thread kept its CPU.
func residence(r io.Reader, pids map[int]bool) (map[hop][]time.Duration, error) {
	lastFD := map[int]int{}   // tid: fd of the system call entered
	open := map[int]*window{} // tid: bytes read, not yet written
	out := map[hop][]time.Duration{}
	for ev, err := range perfEvents(r) {
		if err != nil {
			return nil, err
		}
		pid, tid, t := ev.pid, ev.tid, ev.t
		switch ev.event {
		case "sched:sched_switch":
			if prev, _, _, ok := ev.switched(); ok {
				if w := open[prev]; w != nil {
					w.switched = true
				}
			}
		case "raw_syscalls:sys_enter":
			nr, fd, ok := ev.sysEnter()
			if !ok || !pids[pid] {
				continue
			}
			lastFD[tid] = fd
			if w := open[tid]; nr == sysWrite && w != nil && w.fd != fd {
				delete(open, tid)
				if !w.switched {
					h := hop{pid: pid, readFD: w.fd, wrtFD: fd}
					out[h] = append(out[h], time.Duration((t-w.start)*1e9))
				}
			}
		case "raw_syscalls:sys_exit":
			nr, ret, ok := ev.sysExit()
			if !ok || !pids[pid] {
				continue
			}
			if fd, ok := lastFD[tid]; ok && nr == sysRead && ret > 0 {
				open[tid] = &window{start: t, fd: fd}
			}
		}
	}
	return out, nil
}

// perfEvent is one line of `perf script --ns -F comm,pid,tid,cpu,time,event,trace`.
type perfEvent struct {
	pid, tid    int
	cpu         int
	t           float64 // seconds
	event, rest string
}

// switched reads a sched:sched_switch event: the thread switched out, the
// state it was left in (R: preempted, still runnable) and the thread
// switched in.
func (ev perfEvent) switched() (prev int, prevState string, next int, ok bool) {
	m := switched.FindStringSubmatch(ev.rest)
	if m == nil {
		return 0, "", 0, false
	}
	prev, _ = strconv.Atoi(m[1])
	next, _ = strconv.Atoi(m[3])
	return prev, m[2], next, true
}

// sysEnter reads a raw_syscalls:sys_enter event: the call's number and its
// first argument, the file descriptor of a read or a write.
func (ev perfEvent) sysEnter() (nr, fd int, ok bool) {
	m := sysEnter.FindStringSubmatch(ev.rest)
	if m == nil {
		return 0, 0, false
	}
	nr, _ = strconv.Atoi(m[1])
	arg, _ := strconv.ParseInt(m[2], 16, 64)
	return nr, int(arg), true
}

// sysExit reads a raw_syscalls:sys_exit event: the call's number and what
// it returned.
func (ev perfEvent) sysExit() (nr, ret int, ok bool) {
	m := sysExit.FindStringSubmatch(ev.rest)
	if m == nil {
		return 0, 0, false
	}
	nr, _ = strconv.Atoi(m[1])
	ret, _ = strconv.Atoi(m[2])
	return nr, ret, true
}

// perfEvents yields the events of a perf script's output, skipping lines
// that are not events; a read error comes last.
func perfEvents(r io.Reader) iter.Seq2[perfEvent, error] {
	return func(yield func(perfEvent, error) bool) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			m := perfLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			var ev perfEvent
			ev.pid, _ = strconv.Atoi(m[2])
			ev.tid, _ = strconv.Atoi(m[3])
			ev.cpu, _ = strconv.Atoi(m[4])
			ev.t, _ = strconv.ParseFloat(m[5], 64)
			ev.event, ev.rest = m[6], m[7]
			if !yield(ev, nil) {
				return
			}
		}
		if err := sc.Err(); err != nil {
			yield(perfEvent{}, err)
		}
	}
}

// printResidence prints the p25 and p50 of each hop seen often enough to
// matter (a proxy's own pings and acks make rare hops).
func printResidence(w io.Writer, res map[hop][]time.Duration, names map[int]string) {
	for _, h := range frequent(res, hopLabel(names)) {
		ds := slices.Clone(res[h])
		slices.Sort(ds)
		fmt.Fprintf(w, "%s (pid %d) fd %d -> fd %d: %d windows, p25 %.1fµs, p50 %.1fµs\n", names[h.pid], h.pid, h.readFD, h.wrtFD,
			len(ds), us(ds[len(ds)/4]), us(ds[len(ds)/2]))
	}
}

// runResidence prints what --residence prints from trace, for the
// processes procs names (NAME=PID); given a call log, also the segments of
// the calls through the processes named after the log's targets, with
// runtime=PID naming the runtime.
func runResidence(w io.Writer, trace, callLogPath string, procs []string) error {
	pids, names := map[int]bool{}, map[int]string{}
	byName := map[string]int{}
	runtime := 0
	for _, p := range procs {
		name, v, ok := strings.Cut(p, "=")
		pid, err := strconv.Atoi(v)
		if !ok || err != nil {
			return fmt.Errorf("%q: want NAME=PID", p)
		}
		if name == "runtime" {
			runtime = pid
			continue
		}
		pids[pid], names[pid], byName[name] = true, name, pid
	}
	if len(pids) == 0 {
		return fmt.Errorf("no process named: give NAME=PID arguments")
	}
	f, err := os.Open(trace)
	if err != nil {
		return err
	}
	defer f.Close()
	var calls []loggedCall
	if callLogPath != "" {
		if runtime == 0 {
			return fmt.Errorf("--call-log: name the runtime too (runtime=PID)")
		}
		if calls, err = readCallLogFile(callLogPath); err != nil {
			return err
		}
	}
	// A trace of the whole machine shows the threads being switched in
	// too: then the turns around the windows (turns.go) and the wake-ups
	// the writes cause (wakes.go).
	passes := []func(io.Reader) error{
		func(r io.Reader) error {
			res, err := residence(r, pids)
			printResidence(w, res, names)
			return err
		},
		func(r io.Reader) error {
			ts, err := turns(r, pids)
			printTurns(w, ts, names)
			return err
		},
		func(r io.Reader) error {
			ws, err := wakes(r, pids)
			printWakes(w, ws, names)
			return err
		},
		func(r io.Reader) error {
			if calls == nil {
				return nil
			}
			cs, err := segmentCalls(r, calls, byName, runtime)
			printCalls(w, cs)
			return err
		},
	}
	for _, pass := range passes {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		if err := pass(f); err != nil {
			return fmt.Errorf("%s: %w", trace, err)
		}
	}
	return nil
}

// frequent returns the keys of res with values enough to matter (a
// proxy's own pings and acks make rare hops), in the order of their
// labels.
func frequent[K comparable, V any](res map[K][]V, label func(K) string) []K {
	keys := make([]K, 0, len(res))
	for k, vs := range res {
		if len(vs) >= 100 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b K) int { return strings.Compare(label(a), label(b)) })
	return keys
}

// hopLabel orders hops by process name, then sockets.
func hopLabel(names map[int]string) func(hop) string {
	return func(h hop) string { return fmt.Sprint(names[h.pid], h.readFD, h.wrtFD) }
}
