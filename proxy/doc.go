// Package proxy is crishim's transport: it listens on the kubelet-facing unix
// socket, dials the runtime, and relays every gRPC call it is not told to
// intercept as raw wire bytes, so pass-through calls are never decoded and
// methods newer than the compiled cri-api reach the runtime intact.
//
// The one place where a call stops being pass-through is the Method list given
// to NewServer (see Unary): everything else is relayed. The h2 relay (h2*.go,
// the default) relays HTTP/2 frames and reaches the intercepted methods on an
// in-memory connection to the gRPC server; the grpc relay (forward.go) is the
// gRPC server's raw unknown-service handler, kept as the fallback.
package proxy
