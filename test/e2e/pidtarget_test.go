package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/namespaces"
	"github.com/crishim/crishim/proxy"
	"github.com/crishim/crishim/shim"
)

// appScript leaves a marker in the app's filesystem and sleeps: the debug
// container must find both, through ps and /proc/<pid>/root.
const appScript = "echo app-root-marker > /marker; exec sleep 3600"

// debugConfig is a debug container as the kubelet creates it for
// `kubectl debug --target`: PID namespace TARGET.
func debugConfig(name, targetID, script string) *runtimeapi.ContainerConfig {
	cfg := containerConfig(name, script, nil)
	ns := cfg.Linux.SecurityContext.NamespaceOptions
	ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_TARGET, targetID
	return cfg
}

// podWithApp runs a pod (through rs) with an app container running sleep.
func podWithApp(t *testing.T, rs internalapi.RuntimeService, name string) (string, *runtimeapi.PodSandboxConfig, string) {
	t.Helper()
	return podWithContainer(t, rs, name, appScript)
}

// hostPID is a container's init process as the host sees it.
func hostPID(t *testing.T, rs internalapi.RuntimeService, id string) int {
	t.Helper()
	st, err := rs.ContainerStatus(context.Background(), id, true)
	if err != nil {
		t.Fatalf("ContainerStatus %s: %v", id, err)
	}
	pid, err := namespaces.PIDFromVerboseInfo(st.GetInfo())
	if err != nil {
		t.Fatalf("pid of %s: %v", id, err)
	}
	return pid
}

func pidNamespace(t *testing.T, rs internalapi.RuntimeService, id string) namespaces.ID {
	t.Helper()
	ns, err := namespaces.PIDNamespace(hostPID(t, rs, id))
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func execSync(t *testing.T, rs internalapi.RuntimeService, id string, cmd ...string) string {
	t.Helper()
	stdout, stderr, err := rs.ExecSync(context.Background(), id, cmd, 10*time.Second)
	if err != nil {
		t.Fatalf("ExecSync %v in %s: %v (stderr %q)", cmd, id, err, stderr)
	}
	return string(stdout)
}

// assertSeesApp checks, from inside the debug container, that the app's
// processes and filesystem are there, and from the host that both share one
// PID namespace.
func assertSeesApp(t *testing.T, rs internalapi.RuntimeService, debugID, appID string) {
	t.Helper()
	ps := execSync(t, rs, debugID, "ps", "-o", "pid,args")
	appPID := ""
	for _, line := range strings.Split(ps, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[1] == "sleep" && f[2] == "3600" {
			appPID = f[0]
		}
	}
	if appPID == "" {
		t.Fatalf("ps in the debug container does not list the app's sleep 3600:\n%s", ps)
	}
	if got := execSync(t, rs, debugID, "cat", "/proc/"+appPID+"/root/marker"); strings.TrimSpace(got) != "app-root-marker" {
		t.Errorf("/proc/%s/root/marker from the debug container = %q, want the app's marker", appPID, got)
	}
	if dbg, app := pidNamespace(t, rs, debugID), pidNamespace(t, rs, appID); dbg != app {
		t.Errorf("debug container in %v, app in %v", dbg, app)
	}
}

func metricsText(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPIDTargetJoin(t *testing.T) {
	for _, mode := range []string{shim.PIDTargetNative, shim.PIDTargetEmulate} {
		t.Run(mode, func(t *testing.T) {
			if mode == shim.PIDTargetEmulate {
				needContainerdAPI(t)
			}
			p := startCrishim(t, testbed.Endpoint, "--pid-target-mode", mode)
			rs, _ := criClients(t, p.Endpoint)
			ctx := context.Background()
			podID, pod, appID := podWithApp(t, rs, "target-"+mode)

			debugID, err := rs.CreateContainer(ctx, podID, debugConfig("debug", appID, "exec sleep 3601"), pod)
			if err != nil {
				t.Fatalf("CreateContainer with TARGET: %v", err)
			}
			st, err := rs.ContainerStatus(ctx, debugID, false)
			if err != nil {
				t.Fatal(err)
			}
			if rec := st.GetStatus().GetAnnotations()[shim.PIDTargetAnnotation]; !strings.Contains(rec, appID) || !strings.Contains(rec, `"mode":"`+mode+`"`) {
				t.Errorf("annotation %s = %q, want the target and mode %s", shim.PIDTargetAnnotation, rec, mode)
			}
			if err := rs.StartContainer(ctx, debugID); err != nil {
				t.Fatalf("StartContainer: %v", err)
			}
			assertSeesApp(t, rs, debugID, appID)

			m := metricsText(t, p.Metrics)
			for _, want := range []string{
				`crishim_pid_target_requests_total{call="create",code="OK",mode="` + mode + `"} 1`,
				`crishim_pid_target_requests_total{call="start",code="OK",mode="` + mode + `"} 1`,
			} {
				if !strings.Contains(m, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
		})
	}
}

func TestPIDTargetRejections(t *testing.T) {
	direct, _ := criClients(t, testbed.Endpoint)
	for _, mode := range []string{shim.PIDTargetNative, shim.PIDTargetEmulate} {
		t.Run(mode, func(t *testing.T) {
			if mode == shim.PIDTargetEmulate {
				needContainerdAPI(t)
			}
			p := startCrishim(t, testbed.Endpoint, "--pid-target-mode", mode)
			rs, _ := criClients(t, p.Endpoint)
			ctx := context.Background()
			podID, pod, appID := podWithApp(t, rs, "reject-"+mode)
			otherPodID, otherPod, _ := podWithApp(t, rs, "reject-other-"+mode)
			exitedID := startContainer(t, rs, podID, pod, containerConfig("done", "true", nil))
			waitState(t, rs, exitedID, runtimeapi.ContainerState_CONTAINER_EXITED)

			tests := []struct {
				name   string
				podID  string
				pod    *runtimeapi.PodSandboxConfig
				target string
				code   codes.Code
				field  string
			}{
				{"no target id", podID, pod, "", codes.InvalidArgument, "target_id"},
				{"unknown target", podID, pod, "0123456789abcdef0123", codes.NotFound, "not found"},
				{"target not running", podID, pod, exitedID, codes.FailedPrecondition, "not running"},
				{"target in another pod", otherPodID, otherPod, appID, codes.PermissionDenied, "its own pod"},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					before := containerIDs(t, direct)
					_, err := rs.CreateContainer(ctx, tt.podID, debugConfig("dbg", tt.target, "exec sleep 3601"), tt.pod)
					if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.field) {
						t.Fatalf("CreateContainer: %v; want %s mentioning %q", err, tt.code, tt.field)
					}
					if after := containerIDs(t, direct); len(after) != len(before) {
						t.Errorf("the runtime has %d containers after the rejected create, %d before", len(after), len(before))
					}
				})
			}

			t.Run("target stopped between create and start", func(t *testing.T) {
				victimID := startContainer(t, rs, otherPodID, otherPod, containerConfig("victim", "exec sleep 3600", nil))
				debugID, err := rs.CreateContainer(ctx, otherPodID, debugConfig("late", victimID, "exec sleep 3601"), otherPod)
				if err != nil {
					t.Fatal(err)
				}
				if err := rs.StopContainer(ctx, victimID, 0); err != nil {
					t.Fatal(err)
				}
				err = rs.StartContainer(ctx, debugID)
				if status.Code(err) != codes.FailedPrecondition {
					t.Fatalf("StartContainer after the target stopped: %v; want FailedPrecondition", err)
				}
				// Refused, the container is never started: it stays created, or, where the
				// runtime made its process at create inside the target's PID namespace,
				// that process dies with the namespace and the container ends exited.
				if st := waitState(t, rs, debugID, createdStateAfterTargetStops()); !neverStarted(st) {
					t.Errorf("debug container was started (at %d)", st.GetStartedAt())
				}
			})
		})
	}
}

func containerIDs(t *testing.T, rs internalapi.RuntimeService) []string {
	t.Helper()
	cs, err := rs.ListContainers(context.Background(), &runtimeapi.ContainerFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range cs {
		ids = append(ids, c.Id)
	}
	return ids
}

// waitState waits until the container is in state; it bounds a hang, it
// measures nothing.
func waitState(t *testing.T, rs internalapi.RuntimeService, id string, state runtimeapi.ContainerState) *runtimeapi.ContainerStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := rs.ContainerStatus(context.Background(), id, false)
		if err != nil {
			t.Fatal(err)
		}
		if st.GetStatus().GetState() == state {
			return st.GetStatus()
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s is %s, want %s", id, st.GetStatus().GetState(), state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPIDTargetSurvivesCrishimRestart: in emulate mode the join happens at
// start, from the annotation alone, even in another crishim process.
func TestPIDTargetSurvivesCrishimRestart(t *testing.T) {
	needContainerdAPI(t)
	direct, _ := criClients(t, testbed.Endpoint)
	ctx := context.Background()
	podID, pod, appID := podWithApp(t, direct, "restart")

	first := startCrishim(t, testbed.Endpoint, "--pid-target-mode", "emulate")
	rs1, _ := criClients(t, first.Endpoint)
	debugID, err := rs1.CreateContainer(ctx, podID, debugConfig("debug", appID, "exec sleep 3601"), pod)
	if err != nil {
		t.Fatalf("CreateContainer through the first crishim: %v", err)
	}
	if err := first.Stop(); err != nil {
		t.Fatalf("stop the first crishim: %v", err)
	}

	second := startCrishim(t, testbed.Endpoint, "--pid-target-mode", "emulate")
	rs2, _ := criClients(t, second.Endpoint)
	if err := rs2.StartContainer(ctx, debugID); err != nil {
		t.Fatalf("StartContainer through the second crishim: %v", err)
	}
	assertSeesApp(t, direct, debugID, appID)
}

// stripTarget serves, in this process, a runtime that ignores TARGET: the
// real containerd behind a relay that rewrites TARGET to CONTAINER, as
// containerd before 1.5 did by itself.
func stripTarget(t *testing.T) string {
	t.Helper()
	b, err := proxy.Dial(proxy.BackendOptions{RuntimeEndpoint: testbed.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	rt := runtimeapi.NewRuntimeServiceClient(b.RuntimeConn())
	strip := proxy.Unary("/runtime.v1.RuntimeService/CreateContainer",
		func(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
			if ns := req.GetConfig().GetLinux().GetSecurityContext().GetNamespaceOptions(); ns.GetPid() == runtimeapi.NamespaceMode_TARGET {
				ns.Pid, ns.TargetId = runtimeapi.NamespaceMode_CONTAINER, ""
			}
			return rt.CreateContainer(ctx, req)
		})
	srv, err := proxy.NewServer(b, proxy.ServerOptions{Intercept: []proxy.Method{strip}})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "ignores-target.sock")
	ln, err := proxy.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return "unix://" + sock
}

// TestPIDTargetVerificationCatchesIgnoringRuntime: crishim told the runtime
// honours TARGET, the runtime does not; the debug container must not run.
// The containerd API is disabled, so PIDs come from verbose CRI status.
func TestPIDTargetVerificationCatchesIgnoringRuntime(t *testing.T) {
	p := startCrishim(t, stripTarget(t), "--pid-target-mode", "native", "--containerd-address", "")
	rs, _ := criClients(t, p.Endpoint)
	ctx := context.Background()
	podID, pod, appID := podWithApp(t, rs, "ignored")
	debugID, err := rs.CreateContainer(ctx, podID, debugConfig("debug", appID, "exec sleep 3601"), pod)
	if err != nil {
		t.Fatal(err)
	}
	err = rs.StartContainer(ctx, debugID)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "did not honour TARGET") {
		t.Fatalf("StartContainer on a runtime that ignores TARGET: %v; want Internal, did not honour TARGET", err)
	}
	waitState(t, rs, debugID, runtimeapi.ContainerState_CONTAINER_EXITED)
	if m := metricsText(t, p.Metrics); !strings.Contains(m, `crishim_pid_target_verification_failures_total{mode="native"} 1`) {
		t.Errorf("verification failure not counted:\n%s", m)
	}
}

// TestCrishimctlDebug: the operator's way in, in auto mode, which must pick
// native for every containerd the test bed runs (TARGET is honoured since
// 1.5).
func TestCrishimctlDebug(t *testing.T) {
	p := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, p.Endpoint)
	podID, _, appID := podWithApp(t, rs, "ctl-debug")
	ctl := func(args ...string) (string, error) {
		out, err := exec.Command(filepath.Join(binDir, "crishimctl"), append([]string{"--endpoint", p.Endpoint, "--timeout", "30s"}, args...)...).Output()
		return string(out), err
	}
	out, err := ctl("status")
	if err != nil || !strings.Contains(out, "mode pid-target:") || !strings.Contains(out, "native (configured auto)") {
		t.Errorf("crishimctl status: %v\n%s", err, out)
	}
	for range 2 {
		out, err := ctl("debug", "--target", appID, "--name", "dbg", "--", "ps", "-o", "pid,args")
		if err != nil {
			t.Fatalf("crishimctl debug: %v\n%s", err, out)
		}
		if !strings.Contains(out, "sleep 3600") {
			t.Errorf("crishimctl debug -- ps does not show the app's sleep:\n%s", out)
		}
	}
	cs, err := rs.ListContainers(context.Background(), &runtimeapi.ContainerFilter{PodSandboxId: podID})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range cs {
		names[c.Metadata.Name] = true
	}
	if !names["dbg"] || !names["dbg-2"] {
		t.Errorf("debug containers in the pod: %v; want dbg and dbg-2", names)
	}
	var exit *exec.ExitError
	if _, err := ctl("debug", "--target", appID, "--", "sh", "-c", "exit 3"); !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Errorf("crishimctl debug -- sh -c 'exit 3': %v; want exit status 3", err)
	}
	if _, err := ctl("debug", "--target", "nosuchcontainer", "--", "ps"); err == nil {
		t.Error("crishimctl debug with an unknown target succeeded")
	}
}

// TestCrishimctlDebugAttachesATerminal: on a terminal (a pty made by
// util-linux's script), crishimctl debug attaches it to the debug container
// through crishim's streaming server, as kubectl debug -it does.
func TestCrishimctlDebugAttachesATerminal(t *testing.T) {
	scriptBin, err := exec.LookPath("script")
	if err != nil {
		t.Skip("util-linux script (to make a pty) is not installed")
	}
	p := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, p.Endpoint)
	_, _, appID := podWithApp(t, rs, "ctl-debug-tty")
	ctl := strings.Join([]string{filepath.Join(binDir, "crishimctl"), "--endpoint", p.Endpoint, "--timeout", "30s",
		"debug", "--target", appID, "--name", "tty", "--", "sh", "-c", "'read word; ps -o pid,args; echo seen-$word'"}, " ")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, scriptBin, "-q", "-e", "-c", ctl, "/dev/null")
	// Typed before the session is attached, the word waits in the pty.
	cmd.Stdin = strings.NewReader("tty-ok\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("crishimctl debug on a terminal: %v\n%s", err, out)
	}
	for _, want := range []string{"seen-tty-ok", "sleep 3600"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("terminal session lacks %q:\n%s", want, out)
		}
	}
}
