package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	criendpoint "github.com/crishim/crishim/endpoint"
)

// DefaultMaxMessageSize is the kubelet's CRI message size limit (16 MiB):
// crishim must accept whatever the kubelet may send and the runtime may answer.
const DefaultMaxMessageSize = 16 << 20

// imageServicePrefix routes ImageService calls to the image endpoint.
const imageServicePrefix = "/runtime.v1.ImageService/"

// BackendOptions says where the runtime is.
type BackendOptions struct {
	RuntimeEndpoint string // unix:///path, as the kubelet takes it
	ImageEndpoint   string // empty means the runtime endpoint
	MaxMessageSize  int    // 0 means DefaultMaxMessageSize
	// StatsHandler sees the calls made on the connections (tracing); nil
	// adds nothing. The relay's own connections never reach it.
	StatsHandler stats.Handler
	// ProbeInterval is how often Watch asks a quiet connection's runtime
	// whether it answers (0: DefaultProbeInterval).
	ProbeInterval time.Duration

	// backoff replaces reconnectBackoff: tests make it too long to wait.
	backoff *backoff.Config
}

// DefaultProbeInterval is how often Watch probes the runtime while its
// connection is quiet: a Version call (ImageFsInfo for a separate image
// service), which a runtime answers from memory. It is well inside the
// shipped CrishimRuntimeDown alert's `for:`, and costs the runtime one
// cheap call every few seconds.
const DefaultProbeInterval = 5 * time.Second

// Backend holds the connections to the runtime. They are created lazily and
// reconnect by themselves with a short backoff: a runtime that is down at
// start or restarts later is normal life, not a reason to exit.
type Backend struct {
	runtime, image *grpc.ClientConn
	// The sockets, for the relay's own connections.
	runtimePath, imagePath string
	probeEvery             time.Duration
	backoff                backoff.Config

	// created runs when a runtime socket is created anew (see Watch):
	// the relay's endpoints forget their backoff.
	createdMu sync.Mutex
	created   []func(path string)
}

// reconnectBackoff keeps reconnection quick after a containerd restart
// (grpc's default caps at 2 minutes, far too long for a node daemon) while
// still backing off a runtime that stays down.
var reconnectBackoff = backoff.Config{
	BaseDelay:  50 * time.Millisecond,
	Multiplier: 1.6,
	Jitter:     0.2,
	MaxDelay:   2 * time.Second,
}

// Dial creates the runtime (and, if different, image) connections.
func Dial(opts BackendOptions) (*Backend, error) {
	runtimePath, err := criendpoint.Parse(opts.RuntimeEndpoint)
	if err != nil {
		return nil, fmt.Errorf("runtime endpoint: %w", err)
	}
	imagePath := runtimePath
	if opts.ImageEndpoint != "" {
		if imagePath, err = criendpoint.Parse(opts.ImageEndpoint); err != nil {
			return nil, fmt.Errorf("image endpoint: %w", err)
		}
	}
	size := opts.MaxMessageSize
	if size <= 0 {
		size = DefaultMaxMessageSize
	}
	b := &Backend{runtimePath: runtimePath, imagePath: imagePath, probeEvery: opts.ProbeInterval, backoff: reconnectBackoff}
	if b.probeEvery <= 0 {
		b.probeEvery = DefaultProbeInterval
	}
	if opts.backoff != nil {
		b.backoff = *opts.backoff
	}
	if b.runtime, err = dialUnix(runtimePath, size, b.backoff, opts.StatsHandler); err != nil {
		return nil, fmt.Errorf("runtime endpoint: %w", err)
	}
	b.image = b.runtime
	if imagePath != runtimePath {
		if b.image, err = dialUnix(imagePath, size, b.backoff, opts.StatsHandler); err != nil {
			_ = b.runtime.Close()
			return nil, fmt.Errorf("image endpoint: %w", err)
		}
	}
	return b, nil
}

func dialUnix(path string, maxMsg int, bo backoff.Config, sh stats.Handler) (*grpc.ClientConn, error) {
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// The kubelet uses this authority for unix sockets too.
		grpc.WithAuthority("localhost"),
		grpc.WithDefaultCallOptions(
			grpc.ForceCodecV2(newCodec()),
			grpc.MaxCallRecvMsgSize(maxMsg),
			grpc.MaxCallSendMsgSize(maxMsg),
		),
		// A runtime's answer is held to the limit of crishim's server
		// side: it goes back to a client there.
		grpc.WithMaxHeaderListSize(maxHeaderListSize),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second}),
		// An idle channel would make the next kubelet call pay for a reconnect.
		grpc.WithIdleTimeout(0),
	}
	if sh != nil {
		dopts = append(dopts, grpc.WithStatsHandler(sh))
	}
	conn, err := grpc.NewClient("unix://"+path, dopts...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	conn.Connect()
	return conn, nil
}

// RuntimeConn is the connection to the runtime service, for intercepted
// calls that forward through typed clients.
func (b *Backend) RuntimeConn() *grpc.ClientConn { return b.runtime }

// ImageConn is the connection to the image service.
func (b *Backend) ImageConn() *grpc.ClientConn { return b.image }

// connFor routes a full method name to its backend connection. Anything that
// is not the image service goes to the runtime, including services crishim
// has never heard of.
func (b *Backend) connFor(method string) *grpc.ClientConn {
	if b.image != b.runtime && strings.HasPrefix(method, imageServicePrefix) {
		return b.image
	}
	return b.runtime
}

// Ready reports whether the runtime (and image service) answer CRI calls.
func (b *Backend) Ready(ctx context.Context) error {
	if _, err := runtimeapi.NewRuntimeServiceClient(b.runtime).Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		return fmt.Errorf("runtime service: %w", err)
	}
	if b.image != b.runtime {
		if _, err := runtimeapi.NewImageServiceClient(b.image).ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{}); err != nil {
			return fmt.Errorf("image service: %w", err)
		}
	}
	return nil
}

// Watch reports the runtime connections' ups and downs to onChange until
// ctx ends. backend is "runtime" or "image" (the latter only when the image
// endpoint differs). Meanwhile it watches the runtime's sockets: when one is
// created anew (the runtime restarted), every connection to it reconnects
// at once rather than at the end of its backoff, which after a restart of a
// few seconds had grown to about a second (see watchSocket).
func (b *Backend) Watch(ctx context.Context, onChange func(backend string, up bool)) {
	type watched struct {
		conn  *grpc.ClientConn
		probe func(context.Context) error
	}
	conns := map[string]watched{"runtime": {b.runtime, func(ctx context.Context) error {
		_, err := runtimeapi.NewRuntimeServiceClient(b.runtime).Version(ctx, &runtimeapi.VersionRequest{})
		return err
	}}}
	if b.image != b.runtime {
		conns["image"] = watched{b.image, func(ctx context.Context) error {
			_, err := runtimeapi.NewImageServiceClient(b.image).ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
			return err
		}}
	}
	var wg sync.WaitGroup
	for _, path := range slices.Compact([]string{b.runtimePath, b.imagePath}) {
		wg.Go(func() {
			// An error leaves the backoffs to reconnect by themselves.
			_ = watchSocket(ctx, path, func() { b.socketCreated(path) })
		})
	}
	for name, w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			watchConn(ctx, w.conn, w.probe, b.probeEvery, func(up bool) { onChange(name, up) })
		}()
	}
	wg.Wait()
}

// onSocketCreated adds fn to what runs when a runtime socket is created
// anew; path is the socket's.
func (b *Backend) onSocketCreated(fn func(path string)) {
	b.createdMu.Lock()
	b.created = append(b.created, fn)
	b.createdMu.Unlock()
}

// socketCreated reconnects at once what connects to the socket at path: the
// gRPC connections (a connection in its backoff dials now; one that is
// connected is left alone) and, through the hooks, the relay's endpoints.
func (b *Backend) socketCreated(path string) {
	b.createdMu.Lock()
	hooks := slices.Clone(b.created)
	b.createdMu.Unlock()
	for _, fn := range hooks {
		fn(path)
	}
	if path == b.runtimePath {
		b.runtime.ResetConnectBackoff()
	}
	if path == b.imagePath && b.image != b.runtime {
		b.image.ResetConnectBackoff()
	}
}

// watchConn reports the edges of conn's runtime being up: at once on the
// connection's own (ready, failed, lost), and from probe, called whenever the
// connection has been quiet for every. The probe sees what the connection
// cannot: grpc-go leaves a lost connection idle until the next call, which on
// an idle node may not come for minutes, and a runtime may keep accepting
// calls it no longer answers.
func watchConn(ctx context.Context, conn *grpc.ClientConn, probe func(context.Context) error, every time.Duration, onChange func(up bool)) {
	var up, known bool
	report := func(u bool) {
		if !known || u != up {
			known, up = true, u
			onChange(u)
		}
	}
	prev := connectivity.State(-1)
	for {
		state := conn.GetState()
		if state != prev {
			switch state {
			case connectivity.Ready:
				report(true)
			case connectivity.TransientFailure:
				report(false)
			case connectivity.Idle:
				if prev == connectivity.Ready {
					report(false) // the connection was lost
				}
				// Reconnect now, not at the kubelet's next call: that
				// call would pay for it.
				conn.Connect()
			}
			prev = state
		}
		wctx, cancel := context.WithTimeout(ctx, every)
		changed := conn.WaitForStateChange(wctx, state)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if changed {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err := probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		report(answered(err))
	}
}

// answered says whether a probe's outcome shows a runtime that answers: any
// answer does, even an error status of its own; no connection or no answer
// in time does not.
func answered(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return false
	}
	return true
}

// Close closes the backend connections.
func (b *Backend) Close() error {
	err := b.runtime.Close()
	if b.image != b.runtime {
		err = errors.Join(err, b.image.Close())
	}
	return err
}
