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
	if len(res) != len(want) {
		t.Fatalf("hops %v, want %v", res, want)
	}
	for h, ds := range want {
		got := res[h]
		if len(got) != len(ds) {
			t.Fatalf("%+v: %v, want %v", h, got, ds)
		}
		for i := range ds {
			if d := got[i] - ds[i]; d < -time.Nanosecond || d > time.Nanosecond {
				t.Errorf("%+v: %v, want %v", h, got, ds)
			}
		}
	}
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
	h := hop{pid: 10, readFD: 13, wrtFD: 14}
	if len(res) != 1 || len(res[h]) != 1 {
		t.Fatalf("turns %+v, want one on %+v", res, h)
	}
	want := turnParts{head: 5 * time.Microsecond, body: 7 * time.Microsecond, write: time.Microsecond, tail: 3 * time.Microsecond}
	got := res[h][0]
	for _, d := range []time.Duration{got.head - want.head, got.body - want.body, got.write - want.write, got.tail - want.tail} {
		if d < -time.Nanosecond || d > time.Nanosecond {
			t.Fatalf("parts %+v, want %+v", got, want)
		}
	}
}
