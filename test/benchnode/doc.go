// Command benchnode is `make bench-node`: what the kubelet feels with crishim in front of its
// runtime, against the same kubelet pointed straight at the runtime.
//
// On the test bed's one-node cluster (test/node, RUNTIME picks the runtime; --node its index),
// it points the kubelet at the runtime and at crishim in turn (direct, crishim, direct,
// crishim, ...: each crishim turn is paired with the direct turn before it, so that drift of
// the machine falls on both), and runs the same scripted load each time: a Deployment of
// --pods pods with exec readiness probes on a tenth of them, churned a tenth at a time, a
// steady state, and a `kubectl cp` of --cp-bytes out of a pod. The default load is small
// (5 pods) so that a 2-core machine runs it without queueing: the kubelet's latencies are
// then its runtime's, not its wait for a CPU. Each turn reports
//
//   - the exact mean, from the histograms' _sum and _count over the turn, of the kubelet's
//     kubelet_pod_start_sli_duration_seconds, of kubelet_runtime_operations_duration_seconds
//     per operation and of kubelet_pleg_relist_duration_seconds, read from its /metrics
//     (through the API server's node proxy); its buckets, which start at 5 ms, could not
//     resolve 2%;
//   - the machine's load average at its end;
//   - crishim's CPU (% of one core), RSS and where the RSS goes (the kernel's anonymous and
//     file split, the Go runtime's heap, stacks and GC goal from crishim's /metrics);
//   - the `kubectl cp` throughput.
//
// Per kubelet-side figure it prints the ratio crishim/direct as the geometric mean over the
// pairs, a 95% Student t interval on the pairs' log ratios, and a verdict against ±2%:
// within, outside, or not resolved with this many pairs. After --turns pairs it adds pairs
// until every verdict is resolved or --max-turns pairs ran. Last comes one line that
// scripts read:
//
//	worst kubelet-side ratio crishim/direct = R
//
// where R is the largest of the kubelet-side ratios. The numbers and the command that made
// them are in docs/performance.md.
package main
