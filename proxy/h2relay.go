package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"

	"github.com/crishim/crishim/caller"
	"github.com/crishim/crishim/warnlimit"
)

// relay is the h2 pass-through: it serves the kubelet-facing socket itself
// and relays HTTP/2 frames of pass-through calls to the runtime, with no
// gRPC machinery in between. Intercepted methods and crishim's own services
// are relayed the same way to crishim's gRPC server, which listens on an
// in-memory connection (never on a socket: that would bypass the CRI
// socket's permissions).
type relay struct {
	router    router
	paths     paths
	endpoints [numRoutes]*endpoint
	maxMsg    int
	observe   CallObserver
	protoErrs ProtocolErrorObserver
	log       *slog.Logger
	protoWarn *warnlimit.Limit // protocol error warnings
	// goAwayTimeout is goAwayTimeout but in tests.
	goAwayTimeout time.Duration
	identify      func(net.Conn) *caller.Process
	local         *bufconn.Listener
	grpc          *grpc.Server

	mu        sync.Mutex
	sessions  map[*session]struct{}
	listeners []net.Listener
	stopped   bool
	localUp   bool
	sessWG    sync.WaitGroup // sessions
	serveWG   sync.WaitGroup // accept loops and the local gRPC server
}

// localBufSize is the in-memory connection's buffer per direction, which
// bufconn allocates whole when the connection is made: 64 KiB, the HTTP/2
// initial window, is what the gRPC server lets a call send before its
// first WINDOW_UPDATE, and more than the headers and message of an
// intercepted CRI call. A fuller buffer only makes its writer wait for
// the reader, which never stops reading (grpc-go's reader hands a frame
// on and reads the next; the relay's reads each upstream connection all
// the time). It was 1 MiB: 2 MiB held for as long as each client
// connection that made one intercepted call stays open.
const localBufSize = 64 << 10

func newRelay(b *Backend, gs *grpc.Server, opts ServerOptions, rw map[string]Rewrite, nf map[string]func(string), size int, locals *localCallers) *relay {
	r := &relay{
		maxMsg:   size,
		observe:  opts.Observe,
		log:      opts.Log,
		local:    bufconn.Listen(localBufSize),
		grpc:     gs,
		sessions: map[*session]struct{}{},
		router: router{
			local:      map[string]bool{},
			localIf:    map[string]func() bool{},
			services:   map[string]bool{},
			splitImage: b.imagePath != b.runtimePath,
		},
	}
	r.protoErrs, _ = opts.Observe.(ProtocolErrorObserver)
	r.goAwayTimeout = cmp.Or(opts.goAwayTimeout, goAwayTimeout)
	r.protoWarn = warnlimit.New(warnBurst, warnInterval, opts.warnClock)
	for _, m := range opts.Intercept {
		if m.handler != nil {
			r.router.local[m.FullMethod] = true
			if m.when != nil {
				r.router.localIf[m.FullMethod] = m.when
			}
		}
	}
	r.router.rewrites = rw
	r.router.notFoundOK = nf
	for _, svc := range opts.Services {
		r.router.services[svc.Desc.ServiceName] = true
	}
	known := MethodNames(CRIServices...)
	for _, svc := range opts.Services {
		known = append(known, MethodNames(*svc.Desc)...)
	}
	r.paths = newPaths(&r.router, r.observe, opts.Audited, known)
	r.endpoints[routeRuntime] = unixEndpoint("runtime at "+b.runtimePath, b.runtimePath, b.backoff)
	r.endpoints[routeImage] = unixEndpoint("image service at "+b.imagePath, b.imagePath, b.backoff)
	b.onSocketCreated(func(path string) {
		for _, ep := range r.endpoints {
			if ep.path == path {
				ep.resetBackoff()
			}
		}
	})
	r.endpoints[routeLocal] = &endpoint{name: "crishim gRPC server", dial: locals.dialLocal(r.local.DialContext)}
	r.identify = opts.identify
	if r.identify == nil {
		r.identify = identifyPeer
	}
	return r
}

func (r *relay) serve(l net.Listener) error {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return grpc.ErrServerStopped
	}
	r.listeners = append(r.listeners, l)
	r.serveWG.Add(1)
	if !r.localUp {
		r.localUp = true
		r.serveWG.Add(1)
		go func() {
			defer r.serveWG.Done()
			_ = r.grpc.Serve(r.local)
		}()
	}
	r.mu.Unlock()
	defer r.serveWG.Done()

	var delay time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			r.mu.Lock()
			stopped := r.stopped
			r.mu.Unlock()
			if stopped {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) {
				// Out of file descriptors, say: wait rather than
				// exit, as net/http and grpc-go do.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		delay = 0
		s := newSession(r, nc)
		r.mu.Lock()
		if r.stopped {
			r.mu.Unlock()
			s.refuseLate()
			continue
		}
		r.sessions[s] = struct{}{}
		r.sessWG.Add(1)
		r.mu.Unlock()
		go func() {
			defer r.sessWG.Done()
			s.run()
			r.mu.Lock()
			delete(r.sessions, s)
			r.mu.Unlock()
		}()
	}
}

// shutdown stops accepting, asks every client to go away (in-flight calls
// go on), waits for the sessions to end until ctx is done, then cuts the
// rest.
func (r *relay) shutdown(ctx context.Context) {
	r.mu.Lock()
	r.stopped = true
	for _, l := range r.listeners {
		_ = l.Close()
	}
	sessions := make([]*session, 0, len(r.sessions))
	for s := range r.sessions {
		sessions = append(sessions, s)
	}
	r.mu.Unlock()
	// Each GOAWAY is written by a goroutine of its own: a session may be
	// stuck writing to a client that does not read, and asking it to go
	// away must not hold up the deadline below (grpc-go's Drain only
	// queues its GOAWAY). Killing the sessions unblocks them all.
	var goAways sync.WaitGroup
	for _, s := range sessions {
		goAways.Go(s.goAway)
	}
	done := make(chan struct{})
	go func() {
		r.sessWG.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		r.mu.Lock()
		for s := range r.sessions {
			s.kill()
		}
		r.mu.Unlock()
		<-done
	}
	goAways.Wait()
	// No session is left to call the local server: stop it, then wait for
	// the accept loops.
	r.grpc.Stop()
	_ = r.local.Close()
	r.serveWG.Wait()
}
