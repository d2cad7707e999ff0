// Command benchnode is `make bench-node`: what the kubelet feels with crishim in front of its
// runtime, against the same kubelet pointed straight at the runtime.
//
// On the test bed's one-node cluster (test/node, RUNTIME picks the runtime), it points the
// kubelet at crishim and at the runtime in turn (direct, crishim, direct, crishim, ...: the
// two alternate so that drift of the machine falls on both), and runs the same scripted load
// each time: a Deployment of --pods pods (the kubelet's max is 110) with exec readiness probes
// on a tenth of them, churned a tenth at a time, a steady state, and a `kubectl cp` of
// --cp-bytes out of a pod. Each turn reports
//
//   - pod start-up latency p50 and p99: from the pod's creation to Ready, as a watch on the
//     API server sees them;
//   - the kubelet's own kubelet_runtime_operations_duration_seconds p50 and p99 per operation
//     and kubelet_pleg_relist_duration_seconds p99, from its /metrics (through the API
//     server's node proxy), counted over the turn;
//   - crishim's CPU (% of one core) and RSS over the steady state (crishim turns);
//   - the `kubectl cp` throughput.
//
// It prints each figure's median over the turns of each side, the ratio crishim/direct and
// its spread over the pairs of turns, and, last, one line that scripts read:
//
//	worst kubelet-side ratio crishim/direct = R
//
// where R is the largest of the kubelet-side ratios (start-up latency, runtime operations,
// PLEG relist). The numbers and the command that made them are in docs/performance.md.
package main
