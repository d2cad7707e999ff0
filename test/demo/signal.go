package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/test/crishimproc"
	"github.com/crishim/crishim/test/harness"
)

// signalApp reloads its configuration on SIGHUP and shuts down cleanly on
// SIGUSR1, its stop signal; wait (not a foreground sleep) lets a trap run
// at once.
const signalApp = `trap 'echo "SIGHUP: configuration reloaded"' HUP
trap 'echo "SIGUSR1: stop signal, shutting down cleanly"; exit 0' USR1
echo "app started (pid $$)"
while :; do sleep 3600 & wait $!; done`

// showSignals runs a pod whose app reloads on SIGHUP and declares
// notifiers, signals it, notifies it, and stops it with its stop signal.
func showSignals(ctx context.Context, ctlBin string, d *crishimproc.Process, rs internalapi.RuntimeService, cd *harness.Containerd) error {
	endpoint := d.Endpoint
	say("A pod declaring notifiers in its annotations; its app reloads on SIGHUP and stops on SIGUSR1 (stop_signal)")
	logDir, err := os.MkdirTemp(cd.PodsDir, "signals-")
	if err != nil {
		return err
	}
	annotations := map[string]string{
		"notifier.crishim.io/app.reload": `{"signal":"SIGHUP"}`,
		"notifier.crishim.io/app.quiesce": `{"exec":["sh","-c","sync; touch /tmp/quiesced"],"timeoutSeconds":5,` +
			`"probe":{"exec":["test","-f","/tmp/quiesced"]}}`,
	}
	pod := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "signals", Namespace: "default", Uid: fmt.Sprint(time.Now().UnixNano())},
		Hostname:     "signals",
		LogDirectory: logDir,
		Labels:       map[string]string{"app": "signals-demo"},
		Annotations:  annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	for k, v := range annotations {
		detail("%s: %s", k, v)
	}
	podID, err := rs.RunPodSandbox(ctx, pod, "")
	if err != nil {
		return err
	}
	ctr := &runtimeapi.ContainerConfig{
		Metadata:   &runtimeapi.ContainerMetadata{Name: "app"},
		Image:      &runtimeapi.ImageSpec{Image: cd.BusyboxImage},
		Command:    []string{"/bin/sh", "-c", signalApp},
		LogPath:    "app.log",
		StopSignal: runtimeapi.Signal_SIGNAL_SIGUSR1,
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	ctrID, err := runContainer(ctx, rs, podID, ctr, pod)
	if err != nil {
		return err
	}
	logPath := filepath.Join(logDir, "app.log")
	if err := waitLog(ctx, logPath, "app started"); err != nil {
		return err
	}

	say("crishimctl signal %s SIGHUP: a config reload, with no kill binary needed in the image", short(ctrID))
	if err := ctl(ctx, ctlBin, endpoint, "signal", short(ctrID), "SIGHUP"); err != nil {
		return err
	}
	if err := waitLog(ctx, logPath, "configuration reloaded"); err != nil {
		return err
	}
	showLog(logPath)

	say("crishimctl notify --selector app=signals-demo quiesce: exec action, then the probe until it passes")
	if err := ctl(ctx, ctlBin, endpoint, "notify", "--selector", "app=signals-demo", "quiesce"); err != nil {
		return err
	}
	say("crishimctl notify --pod %s reload: a signal notifier", short(podID))
	if err := ctl(ctx, ctlBin, endpoint, "notify", "--pod", short(podID), "reload"); err != nil {
		return err
	}

	if cd.Runtime == harness.RuntimeContainerd16 {
		say("StopContainer: containerd 1.6 ignores stop_signal, so crishim delivers SIGUSR1 first")
	} else {
		say("StopContainer: %s %s honours stop_signal itself, so crishim passes the call on", cd.RuntimeName, cd.RuntimeVersion)
	}
	st, err := rs.ContainerStatus(ctx, ctrID, false)
	if err != nil {
		return err
	}
	detail("ContainerStatus through crishim: stop_signal %s (annotation %s)", st.Status.GetStopSignal(), st.Status.GetAnnotations()["crishim.io/stop-signal"])
	if err := rs.StopContainer(ctx, ctrID, 10); err != nil {
		return err
	}
	if err := waitLog(ctx, logPath, "shutting down cleanly"); err != nil {
		return err
	}
	showLog(logPath)
	if st, err = rs.ContainerStatus(ctx, ctrID, false); err != nil {
		return err
	}
	detail("container %s, exit code %d: the app's own exit, not a kill", st.Status.GetState(), st.Status.GetExitCode())

	say("crishim's signal and notifier metrics")
	return printMetrics(ctx, d.Metrics, func(line string) bool {
		for _, prefix := range []string{"crishim_signal_deliveries_total{", "crishim_stop_signal_", "crishim_notifier_runs_total{"} {
			if strings.HasPrefix(line, prefix) {
				return true
			}
		}
		return false
	})
}

func ctl(ctx context.Context, ctlBin, endpoint string, args ...string) error {
	out, err := exec.CommandContext(ctx, ctlBin, append([]string{"--endpoint", endpoint, "--timeout", "30s"}, args...)...).CombinedOutput()
	fmt.Print(indent(string(out)))
	if err != nil {
		return fmt.Errorf("crishimctl %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// waitLog waits until the container log has a line with want; the bound
// turns a hang into an error.
func waitLog(ctx context.Context, path, want string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("container log %s has no %q:\n%s", path, want, b)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// showLog prints the container's log without the CRI prefix (time, stream,
// tag).
func showLog(path string) {
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.SplitN(line, " ", 4); len(f) == 4 {
			detail("app log: %s", f[3])
		}
	}
}
