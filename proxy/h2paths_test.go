package proxy

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

type countingObserver struct{ asked map[string]int }

func (o *countingObserver) Method(method string) MethodObserver {
	o.asked[method]++
	return nopMethod{}
}

type nopMethod struct{}

func (nopMethod) Started()                        {}
func (nopMethod) Ended(codes.Code, time.Duration) {}

// The path table answers what the router, the rewrites, NotFoundIsOK and
// the refusals would, for known methods from a table made at start and for
// any other path afresh, without keeping what a client made up.
func TestPathTable(t *testing.T) {
	const (
		version = "/runtime.v1.RuntimeService/Version"
		status  = "/runtime.v1.RuntimeService/ContainerStatus"
		images  = "/runtime.v1.ImageService/ListImages"
		stop    = "/runtime.v1.RuntimeService/StopContainer"
		own     = "/crishim.v1.Signals/Send"
		madeUp  = "/made.up/Method"
		older   = "/runtime.v1alpha2.RuntimeService/Version"
	)
	rt := &router{
		local:      map[string]bool{stop: true},
		services:   map[string]bool{"crishim.v1.Signals": true},
		rewrites:   map[string]Rewrite{status: func(b []byte) []byte { return b }},
		notFoundOK: map[string]func(string){status: func(string) {}},
		splitImage: true,
	}
	obs := &countingObserver{asked: map[string]int{}}
	p := newPaths(rt, obs, nil, append(MethodNames(CRIServices...), own))
	known := len(p.known)
	for _, tc := range []struct {
		path                           string
		route                          route
		refused, rewrite, nf, observed bool
	}{
		{path: version, route: routeRuntime, observed: true},
		{path: status, route: routeRuntime, rewrite: true, nf: true, observed: true},
		{path: images, route: routeImage, observed: true},
		{path: stop, route: routeLocal},
		{path: own, route: routeLocal},
		{path: madeUp, route: routeRuntime, observed: true},
		{path: older, refused: true},
	} {
		for range 2 {
			pi := p.lookup(tc.path)
			if pi.route != tc.route || (pi.refused != "") != tc.refused || (pi.rewrite != nil) != tc.rewrite ||
				(pi.notFoundOK != nil) != tc.nf || (pi.observe != nil) != tc.observed {
				t.Errorf("%s: %+v", tc.path, pi)
			}
		}
	}
	if len(p.known) != known {
		t.Errorf("the table grew from %d to %d paths: a client's made-up paths were kept", known, len(p.known))
	}
	// Known methods were looked up once, at start; others per call.
	if obs.asked[version] != 1 || obs.asked[madeUp] != 2 {
		t.Errorf("observer asked %v", obs.asked)
	}
}
