package main

import (
	"os"
	"runtime"
)

// defaultProcs is how many threads run crishim's Go code at once unless
// the GOMAXPROCS environment variable says otherwise. The relay handles
// each connection on one goroutine and spends its time waking up for small
// reads and writes, not computing: with more than one P, every wake-up
// also wakes a second thread to look for work, a futex and a context
// switch on the critical path of each relayed call. One P cut the latency
// crishim adds to a small call by about a quarter on a 2-core node (see
// docs/performance.md), and leaves more of the node to the kubelet and the
// runtime.
const defaultProcs = 1

// setProcs applies defaultProcs and returns the value in force.
func setProcs() int {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(defaultProcs)
	}
	return runtime.GOMAXPROCS(0)
}
