package proxy

import (
	"time"

	"google.golang.org/grpc/codes"
)

// CallObserver hears about every call the relay passes through. Those
// calls never reach a gRPC handler, so the Stream interceptors do not see
// them; this is how they are counted anyway (metrics.Metrics is one).
type CallObserver interface {
	// Method returns where one method's calls are counted. The relay asks
	// once for each method it knows, at start, and per call for others.
	Method(method string) MethodObserver
}

// OtherCallers is a CallObserver that counts the calls of callers other
// than the kubelet apart (crishim_cri_calls_by_caller_total): the relay
// asks OtherMethod for those, Method for the kubelet's.
type OtherCallers interface {
	OtherMethod(method string) MethodObserver
}

// MethodObserver counts the calls of one method: Started as a call starts,
// Ended once per started call, with its gRPC status code and how long it
// took. An alias of an unnamed type, so that an implementation (package
// metrics) need not import this package to return one.
type MethodObserver = interface {
	Started()
	Ended(code codes.Code, took time.Duration)
}
