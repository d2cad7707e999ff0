package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/test/crishimproc"
	"github.com/crishim/crishim/test/harness"
)

// showStreaming shows exec and port-forward through crishim's streaming
// server, with the clients the kubelet and kubectl use.
func showStreaming(ctx context.Context, ctlBin string, d *crishimproc.Process, cd *harness.Containerd, rs internalapi.RuntimeService, pod *runtimeapi.PodSandboxConfig, podID, ctrID string) error {
	say("Exec through crishim's streaming server (SPDY, as the kubelet streams)")
	resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{
		ContainerId: ctrID,
		Cmd:         []string{"sh", "-c", "read name; echo hello $name; echo this is stderr >&2; exit 3"},
		Stdin:       true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return err
	}
	detail("Exec answered %s", redactToken(resp.Url))
	u, err := url.Parse(resp.Url)
	if err != nil {
		return err
	}
	executor, err := remotecommand.NewSPDYExecutor(&rest.Config{}, http.MethodPost, u)
	if err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	err = executor.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("crishim\n"), Stdout: &stdout, Stderr: &stderr})
	var exit interface{ ExitStatus() int }
	if !errors.As(err, &exit) {
		return fmt.Errorf("exec stream: %w", err)
	}
	detail("stdout: %q  stderr: %q  exit code: %d", stdout.String(), stderr.String(), exit.ExitStatus())
	detail("the same URL again: %s", presentAgain(ctx, resp.Url))

	say("crishimctl exec %s -- uname -a", short(ctrID))
	out, err := exec.CommandContext(ctx, ctlBin, "--endpoint", d.Endpoint, "exec", ctrID, "--", "uname", "-a").CombinedOutput()
	fmt.Print(indent(string(out)))
	if err != nil {
		return fmt.Errorf("crishimctl exec: %w", err)
	}

	say("Port-forward through crishim to an echo server inside the pod (client-go's port-forwarder, as kubectl)")
	echo := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "echo"},
		Image:    &runtimeapi.ImageSpec{Image: cd.BusyboxImage},
		Command:  []string{"/bin/sh", "-c", "exec nc -ll -p 8080 -e cat"},
		LogPath:  "echo.log",
	}
	echoID, err := runContainer(ctx, rs, podID, echo, pod)
	if err != nil {
		return err
	}
	// client-go's port-forwarder gives up on the first refused connection.
	for try := 0; ; try++ {
		_, _, err := rs.ExecSync(ctx, echoID, []string{"sh", "-c", "grep -q ':1F90 [0-9A-F:]* 0A' /proc/net/tcp /proc/net/tcp6"}, 10*time.Second)
		if err == nil {
			break
		}
		if try == 100 {
			return fmt.Errorf("echo server not listening: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	pf, err := rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{8080}})
	if err != nil {
		return err
	}
	detail("PortForward answered %s", redactToken(pf.Url))
	if err := forwardAndEcho(ctx, pf.Url); err != nil {
		return err
	}

	say("crishim's streaming metrics")
	return printMetrics(ctx, d.Metrics, func(line string) bool {
		return strings.HasPrefix(line, "crishim_stream_") && !strings.Contains(line, "_bucket{")
	})
}

func forwardAndEcho(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	transport, upgrader, err := spdy.RoundTripperFor(&rest.Config{})
	if err != nil {
		return err
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	defer func() {
		close(stop)
		<-done
	}()
	select {
	case <-ready:
	case err := <-done:
		return fmt.Errorf("port-forward: %w", err)
	}
	ports, err := fw.GetPorts()
	if err != nil {
		return err
	}
	local := fmt.Sprintf("127.0.0.1:%d", ports[0].Local)
	detail("listening on %s -> pod port 8080", local)
	const size = 16 << 20
	start := time.Now()
	if err := echoThrough(local, size); err != nil {
		return fmt.Errorf("echo through the port-forward: %w", err)
	}
	detail("16 MiB of random data echoed back, SHA-256 equal, in %s", time.Since(start).Round(time.Millisecond))
	return nil
}

func echoThrough(addr string, size int64) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	sent, got := sha256.New(), sha256.New()
	written := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, io.TeeReader(io.LimitReader(rand.Reader, size), sent))
		written <- err
	}()
	if _, err := io.CopyN(got, c, size); err != nil {
		return err
	}
	if err := <-written; err != nil {
		return err
	}
	if !bytes.Equal(sent.Sum(nil), got.Sum(nil)) {
		return errors.New("data came back changed")
	}
	return nil
}

// presentAgain shows that a used token is gone.
func presentAgain(ctx context.Context, rawURL string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	resp.Body.Close()
	return resp.Status + " (tokens are single use)"
}

// redactToken keeps a token out of the demo's output, as crishim keeps them
// out of its logs.
func redactToken(rawURL string) string {
	i := strings.LastIndex(rawURL, "/")
	if i < 0 {
		return rawURL
	}
	return fmt.Sprintf("%s/<token, %d characters>", rawURL[:i], len(rawURL)-i-1)
}
