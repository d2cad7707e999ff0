package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
)

// Options configure Start.
type Options struct {
	// Detach starts containerd in its own session, holding the slot lock, so that it survives
	// this process (for `make demo KEEP=1`); remove it later with Teardown or
	// TeardownDetached. Otherwise containerd gets Pdeathsig SIGKILL so an interrupted test
	// never leaves it behind.
	Detach bool
	// Log, if non-nil, also receives containerd's stdout/stderr; <Dir>/containerd.log always
	// gets them, because error messages quote its tail. With Detach, Log must be nil or an
	// *os.File (which then replaces containerd.log), since nothing in this process can copy
	// output once it has exited.
	Log io.Writer
	// Owner, with Detach, names what the detached containerd belongs to (a node of
	// test/node); TeardownDetached leaves owned slots to their owner's own teardown.
	Owner string
	// Runtime is the runtime to run; empty means RuntimeFromEnv(), so that `RUNTIME=...`
	// reaches every test, the demo, the node and the bench without each passing it on.
	Runtime Runtime
	// Mirrors sends the pulls of each registry host to a mirror URL, e.g. a Registry's
	// Mirrors(); a host without one is asked itself, which fails offline.
	Mirrors map[string]string
}

// Containerd is a running private container runtime in a slot owned by this process. The
// name is from when the runtime was always containerd; Runtime says which it is.
type Containerd struct {
	Runtime Runtime // which runtime runs in the slot
	// RuntimeName and RuntimeVersion are what CRI Version answered once the runtime was
	// ready ("containerd", "v2.4.2"; Debian's 1.6 says "1.6.20~ds1").
	RuntimeName    string
	RuntimeVersion string
	Slot           int    // slot number, 0 <= Slot < MaxSlots
	Dir            string // the slot's root dir, everything lives under it
	Socket         string // the runtime's CRI socket path (containerd's also serves its own API)
	Endpoint       string // "unix://" + Socket, as the kubelet would pass it
	// ContainerdAddress is the containerd API socket to give crishim with
	// --containerd-address, for its containerd-native paths; "" when the runtime is not
	// containerd.
	ContainerdAddress string
	PauseImage        string // sandbox image, named by the CRI config's sandbox_image
	BusyboxImage      string // busybox image with every applet in /bin, default command /bin/sh
	SpareImage        string // a distinct image that tests may remove
	Bridge            string // CNI bridge interface name
	Subnet            string // CIDR host-local IPAM assigns pod IPs from
	Network           string // CNI network name
	Namespace         string // containerd namespace of CRI objects ("k8s.io")
	LogPath           string // containerd's log file
	PodsDir           string // free directory under Dir, e.g. for pod log directories; removed by Stop

	opts    Options
	backend *backend
	layout  layout
	meta    slotMeta
	lock    *os.File

	mu      sync.Mutex
	daemon  *daemon
	stopped bool // set by Stop; the slot is gone, nothing may start again
	stop    sync.Once
	stopEr  error
}

// Start picks the runtime (Options.Runtime, else $RUNTIME), installs or builds what it
// needs, takes the lowest free slot, sweeps whatever an interrupted run left in it, writes
// the configs, starts the runtime, waits until CRI answers with runtime and network ready,
// and imports PauseImage, BusyboxImage and SpareImage.
func Start(ctx context.Context, opts Options) (*Containerd, error) {
	be, err := prepare(ctx, &opts)
	if err != nil {
		return nil, err
	}
	n, lock, err := acquireSlot()
	if err != nil {
		return nil, err
	}
	return startInSlot(ctx, opts, be, n, lock)
}

// Prepare installs or builds what runtime r needs ("" means RuntimeFromEnv()), as Start
// would, without starting it: `make runtime-bins` runs it before the tests so that a cold
// build of containerd never counts against a test's timeout.
func Prepare(ctx context.Context, r Runtime) error {
	_, err := prepare(ctx, &Options{Runtime: r})
	return err
}

// prepare resolves opts.Runtime and readies what its backend needs before a slot is taken.
func prepare(ctx context.Context, opts *Options) (*backend, error) {
	if opts.Runtime == "" {
		r, err := RuntimeFromEnv()
		if err != nil {
			return nil, err
		}
		opts.Runtime = r
	}
	be, err := backendFor(opts.Runtime)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", opts.Runtime, err)
	}
	if err := be.prepare(ctx); err != nil {
		return nil, fmt.Errorf("prepare runtime %s: %w", opts.Runtime, err)
	}
	return be, nil
}

// startInSlot starts the runtime in slot n, whose lock the caller holds and hands over.
func startInSlot(ctx context.Context, opts Options, be *backend, n int, lock *os.File) (*Containerd, error) {
	m := newSlotMeta(n)
	m.Detached = opts.Detach
	m.Owner = opts.Owner
	m.Runtime = be.runtime
	l := layout{slotDir(n)}
	c := &Containerd{
		Runtime:      be.runtime,
		Slot:         n,
		Dir:          l.dir,
		Socket:       l.socket(),
		Endpoint:     "unix://" + l.socket(),
		PauseImage:   PauseImage,
		BusyboxImage: BusyboxImage,
		SpareImage:   SpareImage,
		Bridge:       m.Bridge,
		Subnet:       m.Subnet,
		Network:      m.Network,
		Namespace:    criNamespace,
		LogPath:      l.logFile(),
		PodsDir:      l.pods(),
		opts:         opts,
		backend:      be,
		layout:       l,
		meta:         m,
		lock:         lock,
	}
	if be.runtime.IsContainerd() {
		c.ContainerdAddress = c.Socket
	}
	if err := c.start(ctx); err != nil {
		// Leave nothing half-started behind; the error that matters is the start error.
		_ = c.Stop()
		return nil, fmt.Errorf("start %s in slot %d: %w", be.runtime, n, err)
	}
	return c, nil
}

func (c *Containerd) start(ctx context.Context) error {
	// We own the lock, so anything here is a leftover: sweep it, with the names recorded in
	// it if any (they are what the leftover used), else this slot's names.
	old, err := readSlotMeta(c.Dir)
	if err != nil {
		old = newSlotMeta(c.Slot)
	}
	if err := teardown(ctx, c.Dir, old); err != nil {
		return fmt.Errorf("sweep leftovers: %w", err)
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("create slot dir: %w", err)
	}
	if err := writeSlotMeta(c.Dir, c.meta); err != nil {
		return err
	}
	if err := c.backend.writeConfig(c.layout, c.meta, c.PauseImage); err != nil {
		return err
	}
	mirrors := writeMirrors
	if c.backend.writeMirrors != nil {
		mirrors = c.backend.writeMirrors
	}
	if err := mirrors(c.layout, c.opts.Mirrors); err != nil {
		return err
	}
	// Build before starting containerd: if busybox is unusable, fail before spending a
	// containerd start on it.
	if _, err := buildImageArchive(ctx); err != nil {
		return err
	}
	if err := c.run(ctx); err != nil {
		return err
	}
	if err := c.readVersion(ctx); err != nil {
		return err
	}
	return c.backend.importImages(ctx, c.layout)
}

// readVersion records what the runtime says it is.
func (c *Containerd) readVersion(ctx context.Context) error {
	conn, err := dialCRI(c.Socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	v, err := runtimeVersion(ctx, conn)
	if err != nil {
		return fmt.Errorf("CRI Version: %w", err)
	}
	c.RuntimeName, c.RuntimeVersion = v.GetRuntimeName(), v.GetRuntimeVersion()
	return nil
}

// run starts the containerd process and waits for CRI. Callers hold no lock; run takes c.mu.
func (c *Containerd) run(ctx context.Context) error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return errors.New("harness was stopped")
	}
	d, err := startDaemon(c.backend, c.layout, c.opts, c.lock)
	c.daemon = d
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return waitReady(ctx, c.layout, d)
}

// TagImage gives the imported image src the name dst too (ctr on containerd; on CRI-O,
// which has no tag call, a copy under the new name from the slot's image layout) and waits
// until CRI reports it.
func (c *Containerd) TagImage(ctx context.Context, src, dst string) error {
	return c.backend.tagImage(ctx, c.layout, src, dst)
}

// ImportArchive puts an OCI image archive (BinaryImageArchive's) into the runtime's CRI
// image store, under the names its index gives (ctr import on containerd, ociload on
// CRI-O), and waits until CRI reports names.
func (c *Containerd) ImportArchive(ctx context.Context, archive []byte, names ...string) error {
	if len(names) == 0 {
		return errors.New("import an image archive: no image names to wait for")
	}
	return c.backend.importArchive(ctx, c.layout, archive, names...)
}

// archiveName makes a file name of an archive's first image name.
func archiveName(names []string) string {
	return strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(names[0])
}

// PID returns containerd's process id, or 0 if it is not running.
func (c *Containerd) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.daemon == nil || c.daemon.exited() {
		return 0
	}
	return c.daemon.cmd.Process.Pid
}

// Dial returns a gRPC connection to containerd's socket, for CRI clients
// (runtimeapi.NewRuntimeServiceClient etc.). The caller closes it.
func (c *Containerd) Dial() (*grpc.ClientConn, error) {
	return dialCRI(c.Socket)
}

// Kill SIGKILLs containerd only: shims and containers survive, as after a containerd crash.
// It returns once the process is gone.
func (c *Containerd) Kill() error {
	c.mu.Lock()
	d := c.daemon
	c.mu.Unlock()
	if d == nil || d.exited() {
		return errors.New("containerd is not running")
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill containerd: %w", err)
	}
	select {
	case <-d.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("containerd (pid %d) did not exit after SIGKILL", d.cmd.Process.Pid)
	}
}

// Restart starts containerd again on the same directories and config and waits until CRI
// answers; containerd then reconnects to the surviving shims. A still running containerd is
// killed first, as by Kill.
func (c *Containerd) Restart(ctx context.Context) error {
	if c.PID() != 0 {
		if err := c.Kill(); err != nil {
			return err
		}
	}
	if err := c.run(ctx); err != nil {
		return fmt.Errorf("restart containerd in slot %d: %w", c.Slot, err)
	}
	return nil
}

// Stop tears everything down (pods through CRI, containerd, shims, containers, mounts,
// bridge, files) and then releases the slot. It is idempotent; later calls return the
// first call's result.
func (c *Containerd) Stop() error {
	c.stop.Do(func() {
		c.mu.Lock()
		c.stopped = true
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
		defer cancel()
		c.stopEr = teardown(ctx, c.Dir, c.meta)
		c.mu.Lock()
		d := c.daemon
		c.mu.Unlock()
		if d != nil {
			// teardown killed it by pid; make sure it is reaped before the slot is free.
			if !d.exited() {
				_ = d.cmd.Process.Kill()
			}
			<-d.done
		}
		if err := c.lock.Close(); err != nil {
			c.stopEr = errors.Join(c.stopEr, fmt.Errorf("release slot lock: %w", err))
		}
	})
	return c.stopEr
}
