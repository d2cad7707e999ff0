package e2e

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/tools/remotecommand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestExecThroughCrishimStreaming: exec without a TTY through crishim's
// streaming server, with the kubelet's SPDY and kubectl's WebSocket clients:
// stdin delivered, stdout and stderr apart, the exit code reported.
func TestExecThroughCrishimStreaming(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, d.Endpoint)
	podID, podCfg, ctrID := podWithContainer(t, rs, "exec", sleeperScript)

	for _, ex := range executors {
		t.Run(ex.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{
				ContainerId: ctrID,
				// read, not cat: WebSocket v4 cannot close stdin.
				Cmd:   []string{"sh", "-c", "read line; echo out:$line; echo err:$line >&2; exit 7"},
				Stdin: true, Stdout: true, Stderr: true,
			})
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			checkCrishimURL(t, resp.Url, "exec")
			var stdout, stderr bytes.Buffer
			err = ex.new(t, resp.Url).StreamWithContext(ctx, remotecommand.StreamOptions{
				Stdin: strings.NewReader("hello\n"), Stdout: &stdout, Stderr: &stderr,
			})
			if exitCode(err) != 7 {
				t.Fatalf("stream: %v, want exit code 7", err)
			}
			if stdout.String() != "out:hello\n" || stderr.String() != "err:hello\n" {
				t.Fatalf("stdout %q, stderr %q", stdout.String(), stderr.String())
			}
		})
	}

	t.Run("spdy stdin EOF", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"cat"}, Stdin: true, Stdout: true})
		if err != nil {
			t.Fatal(err)
		}
		var stdout bytes.Buffer
		err = spdyExecutor(t, resp.Url).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("to cat and back\n"), Stdout: &stdout})
		if err != nil || stdout.String() != "to cat and back\n" {
			t.Fatalf("cat: %q, %v", stdout.String(), err)
		}
	})

	t.Run("refused requests", func(t *testing.T) {
		ctx := context.Background()
		stopped := startContainer(t, rs, podID, podCfg, containerConfig("stopped", "exit 0", nil))
		for {
			st, err := rs.ContainerStatus(ctx, stopped, false)
			if err != nil {
				t.Fatal(err)
			}
			if st.Status.State == runtimeapi.ContainerState_CONTAINER_EXITED {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		tests := []struct {
			name string
			req  *runtimeapi.ExecRequest
			code codes.Code
			msg  string
		}{
			{"tty and stderr", &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"sh"}, Tty: true, Stdout: true, Stderr: true}, codes.InvalidArgument, "tty and stderr"},
			{"no stream", &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"sh"}}, codes.InvalidArgument, "one of stdin, stdout and stderr"},
			{"no command", &runtimeapi.ExecRequest{ContainerId: ctrID, Stdout: true}, codes.InvalidArgument, "cmd"},
			{"no such container", &runtimeapi.ExecRequest{ContainerId: "0123456789abcdef", Cmd: []string{"sh"}, Stdout: true}, codes.NotFound, "container_id"},
			{"container not running", &runtimeapi.ExecRequest{ContainerId: stopped, Cmd: []string{"sh"}, Stdout: true}, codes.FailedPrecondition, "not running"},
		}
		for _, tt := range tests {
			_, err := rs.Exec(ctx, tt.req)
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
				t.Errorf("%s: %v, want %v naming %q", tt.name, err, tt.code, tt.msg)
			}
		}
		_, err := rs.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: "0123456789abcdef", Port: []int32{80}})
		if status.Code(err) != codes.NotFound {
			t.Errorf("PortForward to no pod: %v, want NotFound", err)
		}
	})
}

// TestExecTTYThroughCrishimStreaming: a shell in a TTY sees the sizes the
// client sends (`stty size`), and Ctrl-D ends it.
func TestExecTTYThroughCrishimStreaming(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "tty", sleeperScript)

	for _, ex := range executors {
		t.Run(ex.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := rs.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: ctrID, Cmd: []string{"sh"}, Tty: true, Stdin: true, Stdout: true})
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			tm := newTerminal()
			tm.sizes <- remotecommand.TerminalSize{Width: 123, Height: 45}
			done := make(chan error, 1)
			go func() {
				done <- ex.new(t, resp.Url).StreamWithContext(ctx, remotecommand.StreamOptions{
					Stdin: tm.inR, Stdout: tm, Tty: true, TerminalSizeQueue: tm,
				})
			}()
			tm.typeUntil(t, ctx, "stty size\n", "45 123")
			tm.sizes <- remotecommand.TerminalSize{Width: 100, Height: 50}
			tm.typeUntil(t, ctx, "stty size\n", "50 100")
			close(tm.sizes)
			if _, err := tm.in.Write([]byte{4}); err != nil { // Ctrl-D
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("session ended with %v", err)
				}
			case <-ctx.Done():
				t.Fatalf("Ctrl-D did not end the shell:\n%s", tm.output())
			}
		})
	}
}

// TestAttachThroughCrishimStreaming: attach to a container started with
// stdin and a TTY, talk to its shell, and end it.
func TestAttachThroughCrishimStreaming(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, d.Endpoint)
	name := uniqueName("attach")
	podCfg := podConfig(t, name, nil)
	podID := runPod(t, rs, podCfg)
	cfg := containerConfig("shell", "", nil)
	cfg.Command = []string{"/bin/sh"}
	cfg.Stdin, cfg.Tty = true, true
	ctrID := startContainer(t, rs, podID, podCfg, cfg)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := rs.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: ctrID, Stdin: true, Stdout: true, Tty: true})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	checkCrishimURL(t, resp.Url, "attach")
	tm := newTerminal()
	done := make(chan error, 1)
	go func() {
		done <- spdyExecutor(t, resp.Url).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: tm.inR, Stdout: tm, Tty: true})
	}()
	tm.typeUntil(t, ctx, "echo attached-$((6*7))\n", "attached-42")
	if _, err := tm.in.Write([]byte("exit\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Logf("attach ended with the container: %v", err)
	case <-ctx.Done():
		t.Fatalf("attach did not end when the container's shell exited:\n%s", tm.output())
	}
}

// TestCrishimctlExec: `crishimctl exec -i` streams through crishim and
// exits with the command's exit code.
func TestCrishimctlExec(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "ctlexec", sleeperScript)

	cmd := exec.Command(filepath.Join(binDir, "crishimctl"), "--endpoint", d.Endpoint, "exec", "-i", ctrID, "--", "sh", "-c", "cat; echo done >&2; exit 3")
	cmd.Stdin = strings.NewReader("piped through crishim\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("crishimctl exec: %v (exit %d), want exit 3; stderr:\n%s", err, code, stderr.String())
	}
	if stdout.String() != "piped through crishim\n" || !strings.Contains(stderr.String(), "done") {
		t.Fatalf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}
