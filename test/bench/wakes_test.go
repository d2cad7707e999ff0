package main

import (
	"strings"
	"testing"
	"time"
)

// A write's wake-up is the first thread of another process it wakes, from
// the write's return to that thread's switch-in, on the writer's CPU or
// not; wake-ups outside writes, and of the proxy's own threads, are not.
func TestWakesOfWrites(t *testing.T) {
	trace := `
 proxy  10/12  [001]  100.000001000:  raw_syscalls:sys_enter: NR 232 (4, 0, 0, 0, 0, 0)
 proxy  10/11  [000]  100.000010000:  raw_syscalls:sys_enter: NR 1 (e, 7c7448, 1e, 0, 0, 0)
 proxy  10/11  [000]  100.000010500:  sched:sched_wakeup: comm=proxy pid=12 prio=120 target_cpu=001
 proxy  10/11  [000]  100.000011000:  sched:sched_wakeup: comm=runtime pid=21 prio=120 target_cpu=000
 proxy  10/11  [000]  100.000011500:  sched:sched_wakeup: comm=other pid=41 prio=120 target_cpu=001
 proxy  10/11  [000]  100.000012000:  raw_syscalls:sys_exit: NR 1 = 30
 proxy  10/11  [000]  100.000013000:  sched:sched_wakeup: comm=late pid=51 prio=120 target_cpu=000
 proxy  10/11  [000]  100.000015000:  sched:sched_switch: prev_comm=proxy prev_pid=11 prev_prio=120 prev_state=S ==> next_comm=runtime next_pid=21 next_prio=120
 proxy  10/11  [000]  100.000100000:  raw_syscalls:sys_enter: NR 1 (d, 7c7448, 47, 0, 0, 0)
 proxy  10/11  [000]  100.000101000:  sched:sched_wakeup: comm=client pid=31 prio=120 target_cpu=001
 proxy  10/11  [000]  100.000102000:  raw_syscalls:sys_exit: NR 1 = 71
 swapper  0/0  [001]  100.000110000:  sched:sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=client next_pid=31 next_prio=120
 swapper  0/0  [001]  100.000120000:  sched:sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=late next_pid=51 next_prio=120
`
	res, err := wakes(strings.NewReader(trace), map[int]bool{10: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[wakeSource][]wake{
		{10, 14}: {{sameCPU: true, delay: 3 * time.Microsecond}},
		{10, 13}: {{sameCPU: false, delay: 8 * time.Microsecond}},
	}
	checkPerKey(t, res, want, func(a, b wake) bool { return a.sameCPU == b.sameCPU && within1ns(a.delay, b.delay) })
}
