package proxy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/backoff"
)

// route is where the relay sends a call.
type route uint8

const (
	routeRuntime route = iota // the runtime endpoint: everything not listed below
	routeImage                // the image endpoint, when it differs from the runtime's
	routeLocal                // crishim's own gRPC server: intercepted methods and crishim.v1
	numRoutes
)

func (r route) String() string {
	return [...]string{"runtime", "image", "crishim"}[r]
}

// router decides a call's route from its :path alone.
type router struct {
	local      map[string]bool        // intercepted full method names
	localIf    map[string]func() bool // intercepted while the function says so (Method.When)
	services   map[string]bool        // crishim's own services
	rewrites   map[string]Rewrite
	notFoundOK map[string]func(string) // NotFoundIsOK
	splitImage bool
}

// route is where a call to path goes; a call to a method intercepted only
// while a condition holds (localIf) goes where it would if it were not
// intercepted, and the session asks the condition per call.
func (r *router) route(path string) route {
	if r.local[path] && r.localIf[path] == nil {
		return routeLocal
	}
	if service, _, ok := splitMethod(path); ok && r.services[service] {
		return routeLocal
	}
	if r.splitImage && strings.HasPrefix(path, imageServicePrefix) {
		return routeImage
	}
	return routeRuntime
}

// endpoint dials one upstream for every session, with one backoff: a
// runtime that is down is asked again after 50 ms, then less and less often
// up to every 2 s, while calls in between answer Unavailable at once.
type endpoint struct {
	name    string
	path    string // the socket; empty for crishim's gRPC server
	backoff backoff.Config
	dial    func(ctx context.Context) (net.Conn, error)

	mu       sync.Mutex
	failures int
	retryAt  time.Time
	lastErr  error
}

// dialTimeout bounds a dial that blocks (a runtime too busy to accept);
// it is not a latency budget.
const dialTimeout = 5 * time.Second

func unixEndpoint(name, path string, bo backoff.Config) *endpoint {
	var d net.Dialer
	return &endpoint{name: name, path: path, backoff: bo, dial: func(ctx context.Context) (net.Conn, error) {
		return d.DialContext(ctx, "unix", path)
	}}
}

// resetBackoff lets the next call dial at once: the endpoint's socket was
// created anew (Backend.Watch).
func (e *endpoint) resetBackoff() {
	e.mu.Lock()
	e.failures, e.retryAt, e.lastErr = 0, time.Time{}, nil
	e.mu.Unlock()
}

func (e *endpoint) connect(ctx context.Context) (net.Conn, error) {
	e.mu.Lock()
	if time.Now().Before(e.retryAt) {
		err := e.lastErr
		e.mu.Unlock()
		return nil, err
	}
	dial := e.dial // under mu: tests swap it
	e.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	nc, err := dial(dctx)
	if err != nil && ctx.Err() != nil {
		// The session ended (its client hung up, crishim shuts down):
		// that says nothing about the runtime, and must not hold back
		// other sessions' dials.
		return nil, fmt.Errorf("connect to the %s: %w", e.name, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		e.failures++
		e.retryAt = time.Now().Add(backoffDelay(e.backoff, e.failures))
		e.lastErr = fmt.Errorf("connect to the %s: %w", e.name, err)
		return nil, e.lastErr
	}
	e.failures, e.retryAt, e.lastErr = 0, time.Time{}, nil
	return nc, nil
}

// backoffDelay follows bo, the grpc-go connections' policy.
func backoffDelay(bo backoff.Config, failures int) time.Duration {
	d := float64(bo.BaseDelay)
	for i := 1; i < failures && d < float64(bo.MaxDelay); i++ {
		d *= bo.Multiplier
	}
	d = min(d, float64(bo.MaxDelay))
	d *= 1 + bo.Jitter*(rand.Float64()*2-1)
	return time.Duration(d)
}
