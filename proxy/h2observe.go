package proxy

import "google.golang.org/grpc/codes"

// CallObserver hears about every call the h2 relay passes through. Those
// calls never reach a gRPC handler, so the Stream interceptors do not see
// them; this is how they are counted anyway (metrics.Metrics is one).
type CallObserver interface {
	// CallStarted is called as a call starts; the returned function is
	// called once, when it ends, with its gRPC status code.
	CallStarted(method string) (done func(code codes.Code))
}
