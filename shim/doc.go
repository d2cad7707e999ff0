// Package shim holds crishim's CRI services: which calls are intercepted and
// what crishim adds to them, and crishim's own crishim.v1 API. Everything not
// listed by Shim.Intercepted is relayed untouched by package proxy.
//
// Files are named for what they hold, a file's tests beside it
// (containerd's internal/cri/server is the model):
//
//   - shim.go: Options, the Shim, Intercepted (the one list) and the
//     crishim.v1 server type.
//   - The CRI methods intercepted: containers.go (CreateContainer,
//     StartContainer, StopContainer and ContainerStatus, which the features
//     below hook into), streams.go (Exec, Attach, PortForward), execsync.go
//     (ExecSync, while audited), idempotent.go (stop and remove of unknown
//     IDs); cricalls.go audits the CRI calls of callers other than the
//     kubelet.
//   - crishim.v1: statusapi.go (Status), signalapi.go (Signal), notify.go
//     (Notify), with notifier.go (the pod annotation), notifyrun.go (one
//     run) and runslots.go (runs in flight).
//   - Features a runtime may provide itself (modes.go, runtimeinfo.go):
//     target*.go (TARGET, a debug container joining another's PID
//     namespace) and stopsignal*.go (emulated stop_signal).
//   - Debug containers: ephemeral.go and debugimage.go; recording: record.go;
//     audit events: audit.go.
//   - Shared by the features: signalnames.go (Linux signals by name and
//     number), signaldelivery.go (one signal to a container's init process),
//     findcontainer.go, keylock.go, and containerd.go and
//     containerd_signal.go (the containerd API).
package shim
