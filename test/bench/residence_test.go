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
