package main

import (
	"strings"
	"testing"
	"time"
)

// A window runs from the exit of a read that brought bytes to the entry of
// the next write to another socket; a window in which the thread was
// switched out is the scheduler's, not the proxy's, and is left out.
func TestResidenceWindows(t *testing.T) {
	trace := `
 proxy  10/11  [000]  100.000010000:  raw_syscalls:sys_enter: NR 0 (d, 7c7448, 40000, 0, 0, 0)
 proxy  10/11  [000]  100.000012000:  raw_syscalls:sys_exit: NR 0 = 30
 proxy  10/11  [000]  100.000020000:  raw_syscalls:sys_enter: NR 1 (e, 7c7448, 1e, 0, 0, 0)
 proxy  10/11  [000]  100.000021000:  raw_syscalls:sys_exit: NR 1 = 30
 proxy  10/11  [000]  100.000030000:  raw_syscalls:sys_enter: NR 0 (d, 7c7448, 40000, 0, 0, 0)
 proxy  10/11  [000]  100.000031000:  raw_syscalls:sys_exit: NR 0 = -11
 proxy  10/11  [000]  100.000040000:  raw_syscalls:sys_enter: NR 0 (e, 7c7448, 40000, 0, 0, 0)
 proxy  10/11  [000]  100.000041000:  raw_syscalls:sys_exit: NR 0 = 71
 proxy  10/11  [000]  100.000043000:  sched:sched_switch: prev_comm=proxy prev_pid=11 prev_prio=120 prev_state=R ==> next_comm=x next_pid=99 next_prio=120
 proxy  10/11  [000]  100.000060000:  raw_syscalls:sys_enter: NR 1 (d, 7c7448, 47, 0, 0, 0)
 other  20/21  [001]  100.000070000:  raw_syscalls:sys_exit: NR 0 = 30
 proxy  10/11  [000]  100.000080000:  raw_syscalls:sys_enter: NR 0 (e, 7c7448, 40000, 0, 0, 0)
 proxy  10/11  [000]  100.000081000:  raw_syscalls:sys_exit: NR 0 = 71
 proxy  10/11  [000]  100.000084500:  raw_syscalls:sys_enter: NR 1 (d, 7c7448, 47, 0, 0, 0)
`
	res, err := residence(strings.NewReader(trace), map[int]bool{10: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[hop][]time.Duration{
		{pid: 10, readFD: 13, wrtFD: 14}: {8 * time.Microsecond},
		{pid: 10, readFD: 14, wrtFD: 13}: {3500 * time.Nanosecond},
	}
	checkPerKey(t, res, want, within1ns)
}

// A turn splits at the read that brought bytes and the write that passed
// them on; a turn the scheduler cut short is left out with its remainder,
// and so is a turn that relayed nothing.
func TestTurnParts(t *testing.T) {
	trace := `
 proxy  10/11  [000]  99.999990000:  raw_syscalls:sys_enter: NR 281 (6, 7c7448, 80, 0, 0, 0)
 proxy  10/11  [000]  99.999991000:  sched:sched_switch: prev_comm=proxy prev_pid=11 prev_prio=120 prev_state=S ==> next_comm=other next_pid=21 next_prio=120
 other  20/21  [000]  100.000000000:  sched:sched_switch: prev_comm=other prev_pid=21 prev_prio=120 prev_state=S ==> next_comm=proxy next_pid=11 next_prio=120
 proxy  10/11  [000]  100.000002000:  raw_syscalls:sys_exit: NR 281 = 1
 proxy  10/11  [000]  100.000004000:  raw_syscalls:sys_enter: NR 0 (d, 7c7448, 40000, 0, 0, 0)
 proxy  10/11  [000]  100.000005000:  raw_syscalls:sys_exit: NR 0 = 30
 proxy  10/11  [000]  100.000012000:  raw_syscalls:sys_enter: NR 1 (e, 7c7448, 1e, 0, 0, 0)
 proxy  10/11  [000]  100.000013000:  raw_syscalls:sys_exit: NR 1 = 30
 proxy  10/11  [000]  100.000014000:  raw_syscalls:sys_enter: NR 0 (d, 7c7448, 40000, 0, 0, 0)
 proxy  10/11  [000]  100.000014500:  raw_syscalls:sys_exit: NR 0 = -11
 proxy  10/11  [000]  100.000016000:  sched:sched_switch: prev_comm=proxy prev_pid=11 prev_prio=120 prev_state=S ==> next_comm=other next_pid=21 next_prio=120
 other  20/21  [000]  100.000100000:  sched:sched_switch: prev_comm=other prev_pid=21 prev_prio=120 prev_state=S ==> next_comm=proxy next_pid=11 next_prio=120
 proxy  10/11  [000]  100.000101000:  raw_syscalls:sys_enter: NR 0 (e, 7c7448, 40000, 0, 0, 0)
 proxy  10/11  [000]  100.000102000:  raw_syscalls:sys_exit: NR 0 = 71
 proxy  10/11  [000]  100.000103000:  raw_syscalls:sys_enter: NR 1 (d, 7c7448, 47, 0, 0, 0)
 proxy  10/11  [000]  100.000104000:  raw_syscalls:sys_exit: NR 1 = 71
 proxy  10/11  [000]  100.000105000:  sched:sched_switch: prev_comm=proxy prev_pid=11 prev_prio=120 prev_state=R ==> next_comm=other next_pid=21 next_prio=120
 other  20/21  [000]  100.000110000:  sched:sched_switch: prev_comm=other prev_pid=21 prev_prio=120 prev_state=S ==> next_comm=proxy next_pid=11 next_prio=120
 proxy  10/11  [000]  100.000112000:  raw_syscalls:sys_enter: NR 0 (e, 7c7448, 40000, 0, 0, 0)
 proxy  10/11  [000]  100.000113000:  raw_syscalls:sys_exit: NR 0 = -11
 proxy  10/11  [000]  100.000120000:  sched:sched_switch: prev_comm=proxy prev_pid=11 prev_prio=120 prev_state=S ==> next_comm=other next_pid=21 next_prio=120
 other  20/21  [000]  100.000200000:  sched:sched_switch: prev_comm=other prev_pid=21 prev_prio=120 prev_state=S ==> next_comm=proxy next_pid=11 next_prio=120
 proxy  10/11  [000]  100.000201000:  raw_syscalls:sys_enter: NR 0 (d, 7c7448, 40000, 0, 0, 0)
 proxy  10/11  [000]  100.000202000:  raw_syscalls:sys_exit: NR 0 = 30
 proxy  10/11  [000]  100.000205000:  sched:sched_switch: prev_comm=proxy prev_pid=11 prev_prio=120 prev_state=S ==> next_comm=other next_pid=21 next_prio=120
`
	res, err := turns(strings.NewReader(trace), map[int]bool{10: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[hop][]turnParts{{pid: 10, readFD: 13, wrtFD: 14}: {
		{head: 5 * time.Microsecond, body: 7 * time.Microsecond, write: time.Microsecond, tail: 3 * time.Microsecond},
	}}
	checkPerKey(t, res, want, func(a, b turnParts) bool {
		return within1ns(a.head, b.head) && within1ns(a.body, b.body) && within1ns(a.write, b.write) && within1ns(a.tail, b.tail)
	})
}

// checkPerKey fails t unless got has want's keys and no other, each with
// as many values, equal by eq.
func checkPerKey[K comparable, V any](t *testing.T, got, want map[K][]V, eq func(a, b V) bool) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, ws := range want {
		gs := got[k]
		if len(gs) != len(ws) {
			t.Fatalf("%+v: %v, want %v", k, gs, ws)
		}
		for i := range ws {
			if !eq(gs[i], ws[i]) {
				t.Errorf("%+v: %v, want %v", k, gs[i], ws[i])
			}
		}
	}
}

// within1ns says whether two durations read from a trace's seconds are
// the same, to its rounding.
func within1ns(a, b time.Duration) bool {
	d := a - b
	return d >= -time.Nanosecond && d <= time.Nanosecond
}
