package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/shim"
)

// trapScript records each signal of sigs it receives as a line in
// /out/signals, and exits after recording exitOn (none if empty). PID 1
// ignores signals it does not handle, so an untrapped SIGTERM would leave no
// trace: the trap makes a wrong signal visible. "ready" says the traps are
// set. wait (not a foreground sleep) lets a trap run at once.
func trapScript(exitOn string, sigs ...string) string {
	var b strings.Builder
	for _, s := range sigs {
		exit := ""
		if s == exitOn {
			exit = "; exit 0"
		}
		fmt.Fprintf(&b, "trap 'echo %s >> /out/signals%s' %s; ", s, exit, s)
	}
	b.WriteString("echo ready >> /out/signals; while :; do sleep 3600 & wait $!; done")
	return b.String()
}

// trappingContainer runs trapScript in a container whose /out is a host
// directory, returned with the container's ID once the traps are set.
func trappingContainer(t *testing.T, rs internalapi.RuntimeService, podID string, pod *runtimeapi.PodSandboxConfig,
	name string, stop runtimeapi.Signal, exitOn string, sigs ...string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	cfg := containerConfig(name, trapScript(exitOn, sigs...), nil)
	cfg.Mounts = []*runtimeapi.Mount{{ContainerPath: "/out", HostPath: dir}}
	cfg.StopSignal = stop
	id := startContainer(t, rs, podID, pod, cfg)
	eventually(t, name+" ready", func() error {
		if got := signalLines(t, dir); len(got) == 0 || got[0] != "ready" {
			return fmt.Errorf("signals file: %q", got)
		}
		return nil
	})
	return dir, id
}

// signalLines are the lines trapScript wrote, "ready" first.
func signalLines(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "signals"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func count(lines []string, s string) int {
	n := 0
	for _, l := range lines {
		if l == s {
			n++
		}
	}
	return n
}

// assertStopSignalReported checks ContainerStatus through crishim, plain
// and verbose (whose info repeats the annotations, and is the kubelet's
// bytes to keep intact).
func assertStopSignalReported(t *testing.T, rs internalapi.RuntimeService, id string, want runtimeapi.Signal) {
	t.Helper()
	for _, verbose := range []bool{false, true} {
		st, err := rs.ContainerStatus(context.Background(), id, verbose)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.GetStatus().GetStopSignal(); got != want {
			t.Errorf("ContainerStatus (verbose %v) through crishim: stop_signal %s, want %s", verbose, got, want)
		}
		if verbose && st.GetInfo()["info"] == "" {
			t.Errorf("verbose ContainerStatus through crishim lost its info: %v", st.GetInfo())
		}
	}
}

// TestStopSignal: a container created with stop_signal SIGUSR1 and stopped
// through crishim gets SIGUSR1 (its trap writes the marker and exits 0),
// and never SIGTERM. Emulated, crishim delivers it; in auto, crishim does
// what auto decides for the runtime (autoStopSignalMode): it emulates in
// front of containerd 1.6, which ignores stop_signal, and passes the field
// to containerd 2.4, which honours it.
func TestStopSignal(t *testing.T) {
	direct, _ := criClients(t, testbed.Endpoint)
	for _, mode := range []string{shim.StopSignalEmulate, shim.StopSignalAuto} {
		t.Run(mode, func(t *testing.T) {
			if mode == shim.StopSignalEmulate {
				needContainerdAPI(t)
			}
			effective := mode
			if mode == shim.StopSignalAuto {
				effective = autoStopSignalMode()
			}
			p := startCrishim(t, testbed.Endpoint, "--stop-signal-mode", mode)
			rs, _ := criClients(t, p.Endpoint)
			ctx := context.Background()
			pod := podConfig(t, uniqueName("stopsig-"+mode), nil)
			podID := runPod(t, rs, pod)
			dir, id := trappingContainer(t, rs, podID, pod, "usr1", runtimeapi.Signal_SIGNAL_SIGUSR1, "USR1", "USR1", "TERM")

			st, err := direct.ContainerStatus(ctx, id, false)
			if err != nil {
				t.Fatal(err)
			}
			annotation, annotated := st.GetStatus().GetAnnotations()[shim.StopSignalAnnotation]
			switch {
			case effective == shim.StopSignalEmulate && annotation != "SIGUSR1":
				t.Errorf("annotation %s = %q, want SIGUSR1 (emulated)", shim.StopSignalAnnotation, annotation)
			case effective == shim.StopSignalNative && annotated:
				t.Errorf("annotation %s = %q on a natively honoured stop signal, want none", shim.StopSignalAnnotation, annotation)
			}
			// crishim passes the field on in every mode; the runtime's own status shows
			// whether it took it.
			want := runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT
			if runtimeReportsStopSignal() {
				want = runtimeapi.Signal_SIGNAL_SIGUSR1
			}
			if got := st.GetStatus().GetStopSignal(); got != want {
				t.Errorf("%s %s reports stop_signal %s itself, want %s", testbed.RuntimeName, testbed.RuntimeVersion, got, want)
			}
			// Through crishim: emulating, crishim fills in the signal from its
			// annotation; native, the answer is the runtime's own (docs/signals.md), and
			// CRI-O reports RUNTIME_DEFAULT for a signal it honours.
			reported := want
			if effective == shim.StopSignalEmulate {
				reported = runtimeapi.Signal_SIGNAL_SIGUSR1
			}
			assertStopSignalReported(t, rs, id, reported)

			if err := rs.StopContainer(ctx, id, 30); err != nil {
				t.Fatalf("StopContainer: %v", err)
			}
			final := waitState(t, rs, id, runtimeapi.ContainerState_CONTAINER_EXITED)
			if lines := signalLines(t, dir); count(lines, "USR1") != 1 || count(lines, "TERM") != 0 {
				t.Errorf("signals received: %q; want USR1 once and no TERM", lines)
			}
			if final.GetExitCode() != 0 {
				t.Errorf("exit code %d; want 0 (the trap's exit, not a kill)", final.GetExitCode())
			}
			assertStopSignalReported(t, rs, id, reported)
			m := metricsText(t, p.Metrics)
			wants := []string{`crishim_stop_signal_creates_total{code="OK",mode="` + effective + `"} 1`}
			unwanted := []string{}
			if effective == shim.StopSignalEmulate {
				wants = append(wants,
					`crishim_stop_signal_stops_total{outcome="exited"} 1`,
					`crishim_signal_deliveries_total{code="OK",origin="stop",signal="SIGUSR1",via="containerd"} 1`)
			} else {
				// The runtime delivered it: crishim neither signalled nor counted a stop.
				unwanted = append(unwanted, `crishim_stop_signal_stops_total{`, `crishim_signal_deliveries_total{code="OK",origin="stop"`)
			}
			for _, want := range wants {
				if !strings.Contains(m, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
			for _, u := range unwanted {
				if strings.Contains(m, u) {
					t.Errorf("metrics have %s... in native mode", u)
				}
			}
		})
	}
}

// TestStopSignalAfterCrishimRestart: the annotation is the only state, so
// a crishim started after the create still delivers the stop signal. Its
// subject is emulation, so it asks for it: in auto, crishim would leave the
// signal to a runtime that honours it.
func TestStopSignalAfterCrishimRestart(t *testing.T) {
	needContainerdAPI(t)
	ctx := context.Background()
	direct, _ := criClients(t, testbed.Endpoint) // the pod outlives the first crishim
	first := startCrishim(t, testbed.Endpoint, "--stop-signal-mode", shim.StopSignalEmulate)
	rs1, _ := criClients(t, first.Endpoint)
	pod := podConfig(t, uniqueName("stopsig-restart"), nil)
	podID := runPod(t, direct, pod)
	dir, id := trappingContainer(t, rs1, podID, pod, "usr1", runtimeapi.Signal_SIGNAL_SIGUSR1, "USR1", "USR1", "TERM")
	if err := first.Stop(); err != nil {
		t.Fatalf("stop the first crishim: %v", err)
	}

	second := startCrishim(t, testbed.Endpoint, "--stop-signal-mode", shim.StopSignalEmulate)
	rs2, _ := criClients(t, second.Endpoint)
	assertStopSignalReported(t, rs2, id, runtimeapi.Signal_SIGNAL_SIGUSR1)
	if err := rs2.StopContainer(ctx, id, 30); err != nil {
		t.Fatalf("StopContainer through the second crishim: %v", err)
	}
	final := waitState(t, rs2, id, runtimeapi.ContainerState_CONTAINER_EXITED)
	if lines := signalLines(t, dir); count(lines, "USR1") != 1 || count(lines, "TERM") != 0 {
		t.Errorf("signals received: %q; want USR1 once and no TERM", lines)
	}
	if final.GetExitCode() != 0 {
		t.Errorf("exit code %d; want 0", final.GetExitCode())
	}
}

// TestStopSignalNeverTwice: the container records SIGUSR1 and keeps
// running, so every stop ends in a kill; however the kubelet retries, the
// container sees SIGUSR1 once. Emulation's promise, so emulation it asks for.
func TestStopSignalNeverTwice(t *testing.T) {
	needContainerdAPI(t) // every case starts with an emulating crishim
	ctx := context.Background()
	direct, _ := criClients(t, testbed.Endpoint)

	t.Run("concurrent retries", func(t *testing.T) {
		p := startCrishim(t, testbed.Endpoint, "--stop-signal-mode", shim.StopSignalEmulate)
		rs, _ := criClients(t, p.Endpoint)
		pod := podConfig(t, uniqueName("stopsig-retry"), nil)
		podID := runPod(t, rs, pod)
		dir, id := trappingContainer(t, rs, podID, pod, "stubborn", runtimeapi.Signal_SIGNAL_SIGUSR1, "", "USR1", "TERM")
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- rs.StopContainer(ctx, id, 2)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("StopContainer: %v", err)
			}
		}
		waitState(t, rs, id, runtimeapi.ContainerState_CONTAINER_EXITED)
		if lines := signalLines(t, dir); count(lines, "USR1") != 1 || count(lines, "TERM") != 0 {
			t.Errorf("signals received: %q; want USR1 once", lines)
		}
		m := metricsText(t, p.Metrics)
		for _, want := range []string{
			`crishim_stop_signal_stops_total{outcome="killed"} 1`,
			`crishim_stop_signal_stops_total{outcome="already_delivered"} 2`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})

	// The second crishim may run in another mode: the annotation, not the
	// mode, decides who finishes the stop. Relayed by a native crishim to a
	// runtime that honours stop_signal (containerd 2.4), the retry would
	// have the runtime send SIGUSR1 a second time.
	for _, then := range []string{shim.StopSignalEmulate, shim.StopSignalNative, shim.StopSignalAuto} {
		t.Run("crishim killed during the stop, restarted "+then, func(t *testing.T) {
			crashDuringStop(t, direct, then)
		})
	}
}

// crashDuringStop kills an emulating crishim while its stop waits for the
// container, then retries the stop through a crishim in mode then.
func crashDuringStop(t *testing.T, direct internalapi.RuntimeService, then string) {
	ctx := context.Background()
	first := startCrishim(t, testbed.Endpoint, "--stop-signal-mode", shim.StopSignalEmulate)
	rs1, _ := criClients(t, first.Endpoint)
	pod := podConfig(t, uniqueName("stopsig-crash"), nil)
	podID := runPod(t, direct, pod)
	dir, id := trappingContainer(t, rs1, podID, pod, "stubborn", runtimeapi.Signal_SIGNAL_SIGUSR1, "", "USR1", "TERM")
	stopped := make(chan error, 1)
	go func() { stopped <- rs1.StopContainer(ctx, id, 120) }()
	eventually(t, "SIGUSR1 delivered by the first crishim", func() error {
		if lines := signalLines(t, dir); count(lines, "USR1") != 1 {
			return fmt.Errorf("signals: %q", lines)
		}
		return nil
	})
	// No graceful shutdown: crishim dies while the stop waits.
	if err := first.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.Exited()
	if err := <-stopped; err == nil {
		t.Fatal("StopContainer through the killed crishim succeeded")
	}

	second := startCrishim(t, testbed.Endpoint, "--stop-signal-mode", then)
	rs2, _ := criClients(t, second.Endpoint)
	if err := rs2.StopContainer(ctx, id, 2); err != nil {
		t.Fatalf("retried StopContainer through the second crishim: %v", err)
	}
	waitState(t, rs2, id, runtimeapi.ContainerState_CONTAINER_EXITED)
	if lines := signalLines(t, dir); count(lines, "USR1") != 1 || count(lines, "TERM") != 0 {
		t.Errorf("signals received: %q; want USR1 once", lines)
	}
	if m := metricsText(t, second.Metrics); !strings.Contains(m, `crishim_stop_signal_stops_total{outcome="already_delivered"} 1`) {
		t.Errorf("the retry was not counted as already delivered")
	}
}
