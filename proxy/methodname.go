package proxy

import (
	"fmt"
	"strings"
)

// olderCRI starts the packages of the CRI versions before v1 (v1alpha2,
// which containerd 1.6 still serves, and any alpha before it).
const olderCRI = "runtime.v1alpha"

// refusedMethod says why a call is refused before it is routed, or "" to
// route it. Routing matches :path exactly, so the spellings a runtime's
// gRPC server would still dispatch to an intercepted method must not reach
// it: a path without its leading slash (older grpc-go, containerd 1.6's,
// drops the slash only if it is there) and an older CRI version of the same
// services, either of which would skip crishim's checks. Any other path the
// runtime dispatches by the same exact match as crishim's router, so
// relaying it as it came is safe.
//
// It costs a few comparisons and no allocation on the common path.
func refusedMethod(path string) string {
	rest, ok := strings.CutPrefix(path, "/")
	if !ok {
		return malformedMethod(path)
	}
	pos := strings.LastIndexByte(rest, '/')
	if pos < 0 {
		return malformedMethod(path)
	}
	service := rest[:pos]
	if !strings.HasPrefix(service, olderCRI) {
		return ""
	}
	pkg := service
	if dot := strings.LastIndexByte(service, '.'); dot > 0 {
		pkg = service[:dot]
	}
	return fmt.Sprintf("crishim serves CRI v1 only (runtime.v1); the kubelet has used v1 since Kubernetes 1.26, and %s "+
		"would bypass crishim's checks: method %q", pkg, path)
}

// malformedMethod is grpc-go's answer to a path it cannot split, word for
// word, so clients see the same status from crishim as from a runtime.
func malformedMethod(path string) string {
	return fmt.Sprintf("malformed method name: %q", path)
}
