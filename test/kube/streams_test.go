package kube

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// streamModes are the two ways kubectl streams: WebSocket (its default) and SPDY (the
// fallback, still what older clients use). Each is chosen with kubectl's own switch.
var streamModes = []struct {
	name string
	env  []string
}{
	{"websocket", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=true", "KUBECTL_PORT_FORWARD_WEBSOCKETS=true"}},
	{"spdy", []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}},
}

// TestKubectlExec: `kubectl exec -i` feeds stdin to the command, returns its output, and
// exits with the command's exit code; crishim's streaming server carried the session.
func TestKubectlExec(t *testing.T) {
	pod := uniqueName("exec")
	apply(t, podManifest(pod, "", "", "app", "exec sleep 3600"))
	waitReady(t, pod)
	for _, mode := range streamModes {
		t.Run(mode.name, func(t *testing.T) {
			sessions := metricGrowth(t, `crishim_stream_sessions_total{kind="exec"}`)
			out, errOut, code := kubectlEnv(t, mode.env, "hello through crishim\n", "exec", "-i", pod, "-c", "app", "--", "sh", "-c", "tr a-z A-Z; echo oops >&2; exit 7")
			if code != 7 {
				t.Errorf("kubectl exec exit code %d, want the command's 7\nstdout: %s\nstderr: %s", code, out, errOut)
			}
			if out != "HELLO THROUGH CRISHIM\n" {
				t.Errorf("kubectl exec stdout %q", out)
			}
			if !strings.Contains(errOut, "oops") {
				t.Errorf("kubectl exec stderr %q lacks the command's stderr", errOut)
			}
			if d := sessions(); d < 1 {
				t.Errorf("crishim_stream_sessions_total{kind=exec} grew by %v: the session did not go through crishim", d)
			}
		})
	}
}

// TestKubectlPortForward: `kubectl port-forward` reaches a pod's HTTP server through
// crishim's streaming server.
func TestKubectlPortForward(t *testing.T) {
	pod := uniqueName("pf")
	apply(t, podManifest(pod, "", "", "web", "mkdir -p /www && echo served-by-$HOSTNAME > /www/index.html && exec httpd -f -p 8080 -h /www"))
	waitReady(t, pod)
	for _, mode := range streamModes {
		t.Run(mode.name, func(t *testing.T) {
			sessions := metricGrowth(t, `crishim_stream_sessions_total{kind="portforward"}`)
			addr, stop := portForward(t, mode.env, pod, "8080")
			defer stop()
			for i := range 3 { // several requests: one stream each over one session
				resp, err := http.Get("http://" + addr + "/index.html")
				if err != nil {
					t.Fatalf("GET %d through port-forward: %v", i, err)
				}
				body := readAll(t, resp.Body)
				resp.Body.Close()
				if body != "served-by-"+pod+"\n" {
					t.Errorf("GET %d through port-forward: %q", i, body)
				}
			}
			if d := sessions(); d < 1 {
				t.Errorf("crishim_stream_sessions_total{kind=portforward} grew by %v: not through crishim", d)
			}
		})
	}
}

var forwardingLine = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) ->`)

// portForward runs `kubectl port-forward` to a free local port and returns its address.
func portForward(t *testing.T, env []string, pod, port string) (addr string, stop func()) {
	t.Helper()
	cmd := exec.Command(testNode.KubectlPath(), "--kubeconfig", testNode.Kubeconfig, "port-forward", "--address", "127.0.0.1", "pod/"+pod, ":"+port)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := forwardingLine.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case p := <-found:
		return "127.0.0.1:" + p, stop
	case <-time.After(time.Minute):
		stop()
		t.Fatalf("kubectl port-forward printed no forwarding line: %s", stderr.String())
	}
	return "", nil
}
