package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Turns: where a proxy's time goes each time it is woken to relay a call's
// bytes, from a trace of the whole machine (perf record -a: a thread being
// switched in is an event of the thread it replaces). A turn runs from the
// switch-in to the switch-out that puts the thread to sleep, and splits
// into:
//
//   - head: switch-in to the return of the read that brings the bytes (the
//     poller's return, the runtime's scheduling, the read itself);
//   - body: that return to the entry of the last write to another socket
//     (residence, for a turn with one read and one write);
//   - write: the last write;
//   - tail: its return to the switch-out (what the proxy does after
//     relaying, the read that finds the socket empty, parking).
//
// The tail delays the peer only when the peer was woken onto the same CPU
// and did not preempt the proxy. A turn cut short by preemption is left
// out, and so is the rest of it after the thread is back, which starts in
// the middle of the work. docs/performance.md has the commands.

// turnParts are one turn's durations.
type turnParts struct {
	head, body, write, tail time.Duration
}

func (p turnParts) total() time.Duration { return p.head + p.body + p.write + p.tail }

// turnEvent is a system call's entry or exit within a turn.
type turnEvent struct {
	t     float64
	enter bool
	nr    int
	fd    int
	ret   int
}

// turns reads a whole-machine trace and returns, per hop of the given
// processes, the parts of the turns that relayed bytes along it.
func turns(r io.Reader, pids map[int]bool) (map[hop][]turnParts, error) {
	ours := map[int]int{}   // tid: pid, for threads seen in our processes
	lastFD := map[int]int{} // tid: fd of the system call entered
	type turn struct {
		in     float64
		events []turnEvent
	}
	open := map[int]*turn{}  // tid: the turn it is in
	broken := map[int]bool{} // tid: preempted; its next turn is a remainder
	out := map[hop][]turnParts{}
	end := func(pid int, tr *turn, at float64) {
		ev := tr.events
		first := slices.IndexFunc(ev, func(e turnEvent) bool { return !e.enter && e.nr == sysRead && e.ret > 0 })
		last := -1
		for i := len(ev) - 1; i > first && first >= 0; i-- {
			if !ev[i].enter && ev[i].nr == sysWrite && ev[i].fd != ev[first].fd {
				last = i
				break
			}
		}
		if last < 0 {
			return
		}
		entry := last - 1
		for entry > first && !(ev[entry].enter && ev[entry].nr == sysWrite) {
			entry--
		}
		if entry == first {
			return
		}
		sec := func(d float64) time.Duration { return time.Duration(d * 1e9) }
		h := hop{pid: pid, readFD: ev[first].fd, wrtFD: ev[last].fd}
		out[h] = append(out[h], turnParts{
			head:  sec(ev[first].t - tr.in),
			body:  sec(ev[entry].t - ev[first].t),
			write: sec(ev[last].t - ev[entry].t),
			tail:  sec(at - ev[last].t),
		})
	}
	for ev, err := range perfEvents(r) {
		if err != nil {
			return nil, err
		}
		pid, tid, t := ev.pid, ev.tid, ev.t
		if pids[pid] {
			ours[tid] = pid
		}
		switch ev.event {
		case "sched:sched_switch":
			prev, state, next, ok := ev.switched()
			if !ok {
				continue
			}
			if tr := open[prev]; tr != nil {
				delete(open, prev)
				switch {
				case strings.HasPrefix(state, "R"):
					broken[prev] = true
				case broken[prev]:
					delete(broken, prev)
				default:
					end(ours[prev], tr, t)
				}
			}
			if _, ok := ours[next]; ok {
				open[next] = &turn{in: t}
			}
		case "raw_syscalls:sys_enter":
			nr, fd, ok := ev.sysEnter()
			if !ok {
				continue
			}
			lastFD[tid] = fd
			if tr := open[tid]; tr != nil {
				tr.events = append(tr.events, turnEvent{t: t, enter: true, nr: nr, fd: fd})
			}
		case "raw_syscalls:sys_exit":
			nr, ret, ok := ev.sysExit()
			if !ok {
				continue
			}
			if tr := open[tid]; tr != nil {
				tr.events = append(tr.events, turnEvent{t: t, nr: nr, fd: lastFD[tid], ret: ret})
			}
		}
	}
	return out, nil
}

// printTurns prints the p50 of each part, per hop seen often enough.
func printTurns(w io.Writer, res map[hop][]turnParts, names map[int]string) {
	hops := frequent(res, hopLabel(names))
	if len(hops) == 0 {
		return
	}
	fmt.Fprintln(w, "turns (whole-machine trace), p50 of each part:")
	for _, h := range hops {
		ts := res[h]
		p50 := func(part func(turnParts) time.Duration) float64 {
			ds := make([]time.Duration, len(ts))
			for i, tp := range ts {
				ds[i] = part(tp)
			}
			slices.Sort(ds)
			return us(ds[len(ds)/2])
		}
		fmt.Fprintf(w, "%s (pid %d) fd %d -> fd %d: %d turns, head %.1fµs, body %.1fµs, write %.1fµs, tail %.1fµs, whole turn %.1fµs\n",
			names[h.pid], h.pid, h.readFD, h.wrtFD, len(ts),
			p50(func(p turnParts) time.Duration { return p.head }), p50(func(p turnParts) time.Duration { return p.body }),
			p50(func(p turnParts) time.Duration { return p.write }), p50(func(p turnParts) time.Duration { return p.tail }),
			p50(turnParts.total))
	}
}
