package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/test/crishimproc"
	"github.com/crishim/crishim/test/lockedbuf"
)

// holdSocket listens at path as systemd's crishim.socket does and returns the
// socket as the file systemd passes; the test holds it for the life of the test.
func holdSocket(t *testing.T, path string) *os.File {
	t.Helper()
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	f, err := ul.File()
	if err != nil {
		t.Fatal(err)
	}
	ul.Close()
	t.Cleanup(func() { f.Close() })
	return f
}

// startActivated starts crishim on the socket held, as systemd starts
// crishim.service behind crishim.socket; n names its log.
func startActivated(t *testing.T, dir, path string, held *os.File, n int, extra ...string) *crishimproc.Process {
	t.Helper()
	p, err := crishimproc.Start(crishimproc.Options{
		Binary:          filepath.Join(binDir, "crishim"),
		Socket:          path,
		RuntimeEndpoint: testbed.Endpoint,
		LogPath:         filepath.Join(dir, fmt.Sprintf("crishim-%d.log", n)),
		Args:            append([]string{"--containerd-address", testbed.ContainerdAddress}, extra...),
		Listener:        held,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSocketActivatedRestartRefusesNoCall: crishim serves the socket systemd
// passes (fd 3, $LISTEN_FDS, $LISTEN_PID), and a restart (SIGTERM, exit,
// a new crishim on the same socket) 20 times over, while several of the
// kubelet's CRI clients call Version, Status and ListContainers in a loop,
// fails no call: the old crishim stops accepting, sends GOAWAY and finishes
// what is in flight, the socket never stops listening nor leaves its path,
// and the calls made meanwhile wait in its backlog for the new crishim.
// Without socket activation (crishim removes its socket on stop and makes a
// new one at start) the same restarts refuse calls.
func TestSocketActivatedRestartRefusesNoCall(t *testing.T) {
	const restarts, callers = 20, 6
	dir := t.TempDir()
	path := filepath.Join(dir, "crishim.sock")
	held := holdSocket(t, path)
	p := startActivated(t, dir, path, held, 0)
	defer func() {
		if p != nil {
			_ = p.Stop()
			if t.Failed() {
				t.Logf("crishim log:\n%s", p.Log())
			}
		}
	}()
	if !strings.Contains(p.Log(), "serving the socket systemd passed") {
		t.Fatalf("crishim did not say it serves the passed socket:\n%s", p.Log())
	}

	type call struct {
		name string
		do   func(ctx context.Context) error
	}
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures []string // the first 20
		failed   int
		total    int
		longest  time.Duration
		progress = make(chan struct{}, 1)
	)
	for g := range callers {
		// A client of its own each, as separate kubelet-like callers.
		rs, _ := criClients(t, "unix://"+path)
		calls := []call{
			{"Version", func(ctx context.Context) error { _, err := rs.Version(ctx, "v1"); return err }},
			{"Status", func(ctx context.Context) error { _, err := rs.Status(ctx, false); return err }},
			{"ListContainers", func(ctx context.Context) error { _, err := rs.ListContainers(ctx, nil); return err }},
		}
		wg.Go(func() {
			for i := g; !stop.Load(); i++ {
				c := calls[i%len(calls)]
				begin := time.Now()
				err := c.do(context.Background())
				d := time.Since(begin)
				mu.Lock()
				total++
				longest = max(longest, d)
				if err != nil {
					failed++
					if len(failures) < 20 {
						failures = append(failures, fmt.Sprintf("%s after %s: %v", c.name, d, err))
					}
				}
				mu.Unlock()
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		})
	}

	for i := 1; i <= restarts; i++ {
		if err := p.Stop(); err != nil {
			t.Fatalf("restart %d: crishim's exit after SIGTERM: %v\n%s", i, err, p.Log())
		}
		if _, err := os.Lstat(path); err != nil {
			t.Fatalf("restart %d: the stopped crishim removed the socket systemd holds: %v\n%s", i, err, p.Log())
		}
		p = startActivated(t, dir, path, held, i)
		// A call ends after the new crishim started: it serves.
		select {
		case <-progress:
		default:
		}
		select {
		case <-progress:
		case <-time.After(time.Minute):
			t.Fatalf("restart %d: no call completed within a minute of the new crishim's start\n%s", i, p.Log())
		}
	}
	stop.Store(true)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d restarts, %d calls by %d clients, longest call %s", restarts, total, callers, longest)
	if failed > 0 {
		t.Errorf("%d of %d calls failed across the restarts; the first:\n%s", failed, total, strings.Join(failures, "\n"))
	}
}

// TestSocketActivationWrongSocket: a passed socket that is not at --listen's
// path is refused at start with both paths named (the kubelet's endpoint
// names one path), and crishim run by hand on the path of a socket systemd
// holds is refused too, instead of taking the path away from it.
func TestSocketActivationWrongSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "crishim.sock")
	held := holdSocket(t, path)
	other := filepath.Join(dir, "other.sock")
	_, err := crishimproc.Start(crishimproc.Options{
		Binary:          filepath.Join(binDir, "crishim"),
		Socket:          other,
		RuntimeEndpoint: testbed.Endpoint,
		LogPath:         filepath.Join(dir, "wrong.log"),
		Listener:        held,
	})
	if want := "systemd passed the socket " + path + " but --listen is " + other; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("crishim on a passed socket at another path: %v, want an error saying %q", err, want)
	}
	byHand := exec.Command(filepath.Join(binDir, "crishim"), "--config", "", "--listen", path,
		"--runtime-endpoint", testbed.Endpoint, "--metrics-address", "")
	out, err := byHand.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the socket answers") {
		t.Errorf("crishim by hand on systemd's socket: %v\n%s", err, out)
	}
	if fi, err := os.Lstat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("systemd's socket gone: %v", err)
	}
}

// TestRestartEndsLiveExec: exec sessions and a port-forward open when
// crishim restarts go on until the shutdown timeout, then end: each exec
// client (SPDY, WebSocket v4 and v5) returns an error saying crishim shut
// down, the port-forwarder that it lost its connection to the pod (what
// kubectl port-forward prints), the audit log's ended events say crishim
// shut down, crishim's log counts the cut, and the next crishim serves the
// same socket.
func TestRestartEndsLiveExec(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "crishim.sock")
	auditPath := filepath.Join(dir, "audit.log")
	held := holdSocket(t, path)
	p := startActivated(t, dir, path, held, 0, "--audit-log", auditPath, "--shutdown-timeout", "2s")
	// After the pod's cleanup (registered later, run first), which needs a crishim.
	t.Cleanup(func() {
		_ = p.Stop()
		if t.Failed() {
			t.Logf("crishim log:\n%s", p.Log())
		}
	})
	rs, _ := criClients(t, "unix://"+path)
	_, _, ctrID := podWithContainer(t, rs, "restart-exec", sleeperScript)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := map[string]chan error{}
	for _, e := range executors {
		resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"cat"}, Stdin: true, Stdout: true})
		if err != nil {
			t.Fatal(err)
		}
		stdin, stdinW := io.Pipe()
		defer stdinW.Close()
		var stdout lockedbuf.Buffer
		done[e.name] = make(chan error, 1)
		go func() {
			done[e.name] <- e.new(t, resp.Url).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: &stdout})
		}()
		if _, err := stdinW.Write([]byte("before\n")); err != nil {
			t.Fatal(err)
		}
		eventually(t, e.name+" exec's echo", func() error {
			if !strings.Contains(stdout.String(), "before") {
				return os.ErrNotExist
			}
			return nil
		})
	}

	pfDone := livePortForward(t, ctx, rs, echoPod(t, "unix://"+path))

	begin := time.Now()
	if err := p.Stop(); err != nil {
		t.Errorf("exit after SIGTERM: %v\n%s", err, p.Log())
	}
	t.Logf("crishim stopped %s after SIGTERM with %d execs and a port-forward open", time.Since(begin).Round(time.Millisecond), len(done))
	select {
	case err := <-pfDone:
		// What kubectl port-forward prints (docs/install.md).
		if !errors.Is(err, portforward.ErrLostConnectionToPod) {
			t.Errorf("the port-forward's result at the restart: %v, want %v", err, portforward.ErrLostConnectionToPod)
		}
	case <-ctx.Done():
		t.Fatal("the port-forward went on after crishim exited")
	}
	for _, e := range executors {
		select {
		case err := <-done[e.name]:
			// SPDY: crishim parses an audited exec's frames, so it can
			// end it with a status on its error stream.
			if err == nil || !strings.Contains(err.Error(), "crishim is shutting down") {
				t.Errorf("the %s exec client's result at the restart: %v, want an error saying crishim is shutting down", e.name, err)
			} else {
				t.Logf("the %s exec client's result at the restart: %v", e.name, err)
			}
		case <-ctx.Done():
			t.Fatalf("the %s exec went on after crishim exited", e.name)
		}
	}
	var ended []audit.Event
	eventually(t, "the execs' ended events", func() error {
		ended = nil
		for _, ev := range readAudit(t, auditPath) {
			if ev.Kind == audit.KindExec && ev.Stage == audit.StageEnded {
				ended = append(ended, ev)
			}
		}
		if len(ended) < len(executors) {
			return os.ErrNotExist
		}
		return nil
	})
	pf := auditEvent(t, auditPath, "the port-forward's ended event", func(ev audit.Event) bool {
		return ev.Kind == audit.KindPortForward && ev.Stage == audit.StageEnded
	})
	for _, ev := range append(ended, pf) {
		if ev.DurationSeconds == nil || ev.BytesToClient == nil || !strings.Contains(ev.Error, "crishim shut down") {
			t.Errorf("a cut session's ended event lacks its duration, bytes or an error saying crishim shut down: %+v", ev)
		}
	}
	t.Logf("audit ended event of a cut exec: error %q", ended[0].Error)
	if !strings.Contains(p.Log(), "cutting streams still open at the shutdown timeout") {
		t.Errorf("crishim did not log the cut:\n%s", p.Log())
	}

	p = startActivated(t, dir, path, held, 1)
	if _, err := rs.Version(ctx, "v1"); err != nil {
		t.Errorf("Version through the next crishim: %v", err)
	}
}

// livePortForward forwards a local port to echoPod's echoPort through
// crishim, as kubectl port-forward does, echoes once through it, and
// returns what the forwarder will return.
func livePortForward(t *testing.T, ctx context.Context, rs internalapi.RuntimeService, podID string) <-chan error {
	t.Helper()
	resp, err := rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{echoPort}})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(resp.Url)
	if err != nil {
		t.Fatal(err)
	}
	transport, upgrader, err := spdy.RoundTripperFor(&rest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	stopCh, ready := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stopCh) })
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", echoPort)}, stopCh, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward: %v", err)
	}
	ports, err := fw.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	if err := echoOnce(fmt.Sprintf("127.0.0.1:%d", ports[0].Local)); err != nil {
		t.Fatalf("echo through the port-forward: %v", err)
	}
	return done
}
