package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/test/harness"
)

// streamPort is where the port-forward pod's server listens, inside the
// pod's network namespace only.
const streamPort = 7000

// streamSetup is what the streaming workloads need on the backend: a running
// container to exec in and a pod whose server writes size bytes to every
// connection on streamPort.
type streamSetup struct {
	execContainer string
	pfPod         string
	size          int64
}

// setupStreaming starts the port-forward pod on the backend (outside the
// populated set: it carries none of the bench labels) and waits until its
// server listens, since client-go's port-forwarder gives up on the first
// refused connection.
func setupStreaming(ctx context.Context, cd *harness.Containerd, rt runtimeapi.RuntimeServiceClient, execContainer string, size int64) (*streamSetup, error) {
	const name = "bench-stream"
	logDir := filepath.Join(cd.PodsDir, name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	pidContainer := &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER}
	pod := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "bench", Uid: "uid-" + name},
		Hostname:     name,
		LogDirectory: logDir,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{NamespaceOptions: pidContainer}},
	}
	resp, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pod})
	if err != nil {
		return nil, fmt.Errorf("run pod %s: %w", name, err)
	}
	// busybox nc: -ll with -e serves every connection, -e takes the rest
	// of the arguments as the program.
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "zero"},
		Image:    &runtimeapi.ImageSpec{Image: cd.BusyboxImage},
		Command:  []string{"/bin/nc", "-ll", "-p", strconv.Itoa(streamPort), "-e", "/bin/head", "-c", strconv.FormatInt(size, 10), "/dev/zero"},
		LogPath:  "zero.log",
		Linux:    &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: pidContainer}},
	}
	c, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: resp.PodSandboxId, Config: cfg, SandboxConfig: pod})
	if err != nil {
		return nil, fmt.Errorf("create container in %s: %w", name, err)
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		return nil, fmt.Errorf("start container in %s: %w", name, err)
	}
	// Listening sockets are state 0A in /proc/net/tcp*, ports in hex.
	script := fmt.Sprintf("grep -q ':%04X [0-9A-F:]* 0A' /proc/net/tcp /proc/net/tcp6", streamPort)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		r, err := rt.ExecSync(wctx, &runtimeapi.ExecSyncRequest{ContainerId: c.ContainerId, Cmd: []string{"sh", "-c", script}, Timeout: 10})
		if err == nil && r.ExitCode == 0 {
			break
		}
		select {
		case <-wctx.Done():
			return nil, fmt.Errorf("the port-forward server in %s does not listen on %d (last: %v)", name, streamPort, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return &streamSetup{execContainer: execContainer, pfPod: resp.PodSandboxId, size: size}, nil
}

// streamTransfer moves s.size bytes once through t's streaming URL and
// returns how long that took.
type streamTransfer func(ctx context.Context, t *target, s *streamSetup) (time.Duration, error)

// transferTimeout bounds one transfer: generous (4 MiB/s plus a minute),
// it turns a hang into an error and measures nothing.
func transferTimeout(size int64) time.Duration {
	return time.Minute + time.Duration(size/(4<<20))*time.Second
}

// countingWriter discards what it is given and counts it.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// execStdout runs `head -c size /dev/zero` through CRI Exec (stdout only, no
// TTY) and streams its stdout with the kubelet's SPDY client.
func execStdout(ctx context.Context, t *target, s *streamSetup) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, transferTimeout(s.size))
	defer cancel()
	resp, err := t.rt.Exec(ctx, &runtimeapi.ExecRequest{
		ContainerId: s.execContainer,
		Cmd:         []string{"head", "-c", strconv.FormatInt(s.size, 10), "/dev/zero"},
		Stdout:      true,
	})
	if err != nil {
		return 0, fmt.Errorf("exec request: %w", err)
	}
	u, err := url.Parse(resp.Url)
	if err != nil {
		return 0, fmt.Errorf("exec URL %q: %w", resp.Url, err)
	}
	ex, err := remotecommand.NewSPDYExecutor(&rest.Config{}, http.MethodPost, u)
	if err != nil {
		return 0, err
	}
	var out countingWriter
	start := time.Now()
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out})
	elapsed := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("exec stream (%d of %d bytes): %w", out.n, s.size, err)
	}
	if out.n != s.size {
		return 0, fmt.Errorf("exec stream: %d bytes, want %d", out.n, s.size)
	}
	return elapsed, nil
}

// portForward forwards a local port to streamPort in the pod with client-go's
// port-forwarder (what kubectl port-forward uses) and reads s.size bytes from
// one connection to it.
func portForward(ctx context.Context, t *target, s *streamSetup) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, transferTimeout(s.size))
	defer cancel()
	resp, err := t.rt.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: s.pfPod, Port: []int32{streamPort}})
	if err != nil {
		return 0, fmt.Errorf("port-forward request: %w", err)
	}
	u, err := url.Parse(resp.Url)
	if err != nil {
		return 0, fmt.Errorf("port-forward URL %q: %w", resp.Url, err)
	}
	transport, upgrader, err := spdy.RoundTripperFor(&rest.Config{})
	if err != nil {
		return 0, err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	var fwErr lockedBuffer
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", streamPort)}, stop, ready, io.Discard, &fwErr)
	if err != nil {
		return 0, err
	}
	fwDone := make(chan error, 1)
	go func() { fwDone <- fw.ForwardPorts() }()
	stopped := false
	stopForwarder := func() error {
		if !stopped {
			stopped = true
			close(stop)
		}
		select {
		case err := <-fwDone:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("the port-forwarder did not stop within 30s")
		}
	}
	select {
	case <-ready:
	case err := <-fwDone:
		return 0, fmt.Errorf("port-forward: %v %s", err, fwErr.String())
	case <-ctx.Done():
		_ = stopForwarder()
		return 0, fmt.Errorf("port-forward not ready: %w", ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		_ = stopForwarder()
		return 0, fmt.Errorf("port-forward ports %v: %v", ports, err)
	}

	start := time.Now()
	n, err := readFrom(ctx, fmt.Sprintf("127.0.0.1:%d", ports[0].Local), s.size)
	elapsed := time.Since(start)
	if serr := stopForwarder(); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return 0, fmt.Errorf("read %d of %d bytes through the port-forward: %w %s", n, s.size, err, fwErr.String())
	}
	return elapsed, nil
}

// readFrom connects to addr and reads size bytes, within ctx.
func readFrom(ctx context.Context, addr string, size int64) (int64, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	return io.CopyN(io.Discard, conn, size)
}

// lockedBuffer collects the port-forwarder's error output, written from one
// goroutine per connection.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// measureStreaming runs each streaming workload rounds times per target,
// alternating the targets and which one goes first, and reports the median
// MiB/s of each and crishim's CPU per GiB streamed.
func measureStreaming(ctx context.Context, o options, rep *report, backend string, s *streamSetup, direct, viaCrishim *target) error {
	mib := float64(s.size) / (1 << 20)
	workloads := []struct {
		name string
		fn   streamTransfer
	}{
		{fmt.Sprintf("exec stdout %.0f MiB", mib), execStdout},
		{fmt.Sprintf("port-forward %.0f MiB", mib), portForward},
	}
	targets := []*target{direct, viaCrishim}
	for _, wl := range workloads {
		if !o.wants(wl.name) {
			continue
		}
		rates := map[string][]float64{}
		var crishimCPU time.Duration
		for i := range o.streamRounds {
			for j := range targets {
				t := targets[(i+j)%len(targets)]
				progress("%s: %s, round %d/%d, %s", backend, wl.name, i+1, o.streamRounds, t.name)
				before, _ := cpuTime(viaCrishim.pid)
				d, err := wl.fn(ctx, t, s)
				if err != nil {
					return fmt.Errorf("%s %s via %s: %w", backend, wl.name, t.name, err)
				}
				if t == viaCrishim {
					after, _ := cpuTime(viaCrishim.pid)
					crishimCPU += after - before
				}
				rates[t.name] = append(rates[t.name], mib/d.Seconds())
			}
		}
		gib := float64(s.size) * float64(o.streamRounds) / (1 << 30)
		rep.addStreaming(backend, wl.name, rates, crishimCPU.Seconds()/gib)
	}
	rep.Notes = append(rep.Notes, "streaming: the naive forwarder answers with containerd's own URLs (the streams go direct), "+
		"crishim-grpc streams as crishim does (--relay is for gRPC only), and the pipe hands on the CRI call's URL, "+
		"so none of them is measured separately")
	return nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
