package shim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/metrics"
)

// The deliver-once path of emulated stop signals, against the fake
// containerd (containerd_fake_test.go): the record of the delivery is the
// label StopSignalDeliveredLabel on the container in containerd, written
// before the signal, so that no crishim, restarted or not, ever signals a
// container twice.

// addEmulated puts a running container in f as a crishim emulating its
// stop signal (SIGUSR1) created it; its process exits on that signal.
func addEmulated(f *targetFakeRuntime, id string) {
	f.add(id, "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.containers[id]
	c.annotations = map[string]string{StopSignalAnnotation: "SIGUSR1"}
	c.exitOn = syscall.SIGUSR1
}

// signalShim is one crishim process in front of f, with the containerd API
// and stop-signal mode mode; a second one over the same f is that crishim
// restarted.
func signalShim(t *testing.T, f *targetFakeRuntime, mode string, reg *prometheus.Registry) *Shim {
	t.Helper()
	return New(serveFakeRuntime(t, f), Options{StopSignalMode: mode, Containerd: f.containerd(), SignalMetrics: metrics.NewSignals(reg)})
}

// stopOutcomes are crishim_stop_signal_stops_total's outcomes, "outcome=n".
func stopOutcomes(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "crishim_stop_signal_stops_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out = append(out, fmt.Sprintf("%s=%g", m.GetLabel()[0].GetValue(), m.GetCounter().GetValue()))
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// stopRequest is the kubelet's StopContainer with a grace period of 10 s.
func stopRequest(id string) *runtimeapi.StopContainerRequest {
	return &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 10}
}

const (
	labelCall = "label c1 " + StopSignalDeliveredLabel + "=SIGUSR1"
	killCall  = "kill c1 SIGUSR1"
)

// TestStopSignalLabelWrittenBeforeTheSignal: the record goes to containerd
// before the signal, and without the record there is no signal; the runtime
// then ends the stop with timeout 0 (a delivered signal) or as it was asked
// (nothing delivered).
func TestStopSignalLabelWrittenBeforeTheSignal(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(f *targetFakeRuntime)
		calls   []string
		timeout int64 // of the StopContainer the runtime got
		outcome string
	}{
		{name: "the process exits on its signal", calls: []string{labelCall, killCall}, outcome: "exited=1"},
		{
			name:  "the label cannot be written",
			setup: func(f *targetFakeRuntime) { f.ctrd.updateErr = fmt.Errorf("boltdb: %w", errdefs.ErrUnavailable) },
			calls: nil, timeout: 10, outcome: "delivery_failed=1",
		},
		{
			name:  "the task ended between the label and the signal",
			setup: func(f *targetFakeRuntime) { f.ctrd.killErr = status.Error(codes.NotFound, "process already finished") },
			calls: []string{labelCall, killCall}, outcome: "not_running=1",
		},
		{
			name:  "the kill fails otherwise",
			setup: func(f *targetFakeRuntime) { f.ctrd.killErr = status.Error(codes.Unavailable, "shim gone") },
			calls: []string{labelCall, killCall}, timeout: 10, outcome: "delivery_failed=1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTargetFake()
			addEmulated(f, "c1")
			if tt.setup != nil {
				tt.setup(f)
			}
			reg := prometheus.NewRegistry()
			s := signalShim(t, f, StopSignalEmulate, reg)
			if _, err := s.signals.stop(context.Background(), stopRequest("c1")); err != nil {
				t.Fatalf("StopContainer: %v", err)
			}
			if got := f.containerdCalls(); !slices.Equal(got, tt.calls) {
				t.Errorf("containerd calls %q, want %q", got, tt.calls)
			}
			if !slices.Equal(f.stopped, []string{"c1"}) || f.stopTimeouts[0] != tt.timeout {
				t.Errorf("the runtime stopped %v with timeouts %v; want c1 with %d", f.stopped, f.stopTimeouts, tt.timeout)
			}
			if got := stopOutcomes(t, reg); got != tt.outcome {
				t.Errorf("outcomes %s, want %s", got, tt.outcome)
			}
		})
	}
}

// TestStopSignalNeverTwiceAcrossRestarts: wherever a stop is cut short (a
// crishim dying, a kubelet giving up), the StopContainer that comes next,
// to the same crishim or a restarted one, finds the label and does not
// signal again.
func TestStopSignalNeverTwiceAcrossRestarts(t *testing.T) {
	tests := []struct {
		name string
		// before plays what happened before the stop under test; it may
		// use first, the crishim that ran then.
		before  func(t *testing.T, f *targetFakeRuntime, first *Shim)
		kills   int    // signals sent, ever
		outcome string // of the stop under test, by the restarted crishim
		timeout int64  // of its StopContainer to the runtime
	}{
		{
			name: "crishim died after the label, before the signal",
			before: func(_ *testing.T, f *targetFakeRuntime, _ *Shim) {
				// The signal is lost: the retry waits out the grace
				// period (a second here) and the runtime kills.
				f.delivered("c1", labelCall)
			},
			kills: 0, outcome: "already_delivered=1", timeout: 0,
		},
		{
			name: "crishim died after the signal, while the process shut down",
			before: func(_ *testing.T, f *targetFakeRuntime, _ *Shim) {
				f.delivered("c1", labelCall, killCall)
				f.setHooks(nil, exitWhenWaited(f))
			},
			kills: 1, outcome: "already_delivered=1", timeout: 0,
		},
		{
			name: "the kubelet gave up waiting, then crishim restarted",
			before: func(t *testing.T, f *targetFakeRuntime, first *Shim) {
				f.setExitOn("c1", 0) // it takes its time
				ctx, cancel := context.WithCancel(context.Background())
				f.setHooks(nil, func(string) { cancel() })
				if _, err := first.signals.stop(ctx, stopRequest("c1")); status.Code(err) != codes.Canceled {
					t.Fatalf("the abandoned StopContainer: %v; want Canceled", err)
				}
				f.setHooks(nil, exitWhenWaited(f))
			},
			kills: 1, outcome: "already_delivered=1", timeout: 0,
		},
		{
			name: "a second StopContainer came while the first waited",
			before: func(t *testing.T, f *targetFakeRuntime, first *Shim) {
				f.setExitOn("c1", 0)
				waits := 0 // the hook runs in the first stop's goroutine, and the second's within it
				f.setHooks(nil, func(string) {
					if waits++; waits > 1 {
						exitWhenWaited(f)("c1") // the second waits too: now the process ends
						return
					}
					if _, err := first.signals.stop(context.Background(), stopRequest("c1")); err != nil {
						t.Errorf("the second StopContainer: %v", err)
					}
				})
				if _, err := first.signals.stop(context.Background(), stopRequest("c1")); err != nil {
					t.Fatalf("the first StopContainer: %v", err)
				}
				if got := f.stopTimeouts; !slices.Equal(got, []int64{0, 0}) {
					t.Errorf("the runtime's stops had timeouts %v, want both 0", got)
				}
			},
			// The restarted crishim finds it exited: forwarded as it came.
			kills: 1, outcome: "not_running=1", timeout: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newTargetFake()
			addEmulated(f, "c1")
			first := signalShim(t, f, StopSignalEmulate, prometheus.NewRegistry())
			tt.before(t, f, first)

			reg := prometheus.NewRegistry()
			restarted := signalShim(t, f, StopSignalEmulate, reg)
			req := stopRequest("c1")
			req.Timeout = 1
			if _, err := restarted.signals.stop(context.Background(), req); err != nil {
				t.Fatalf("StopContainer to the restarted crishim: %v", err)
			}
			var kills int
			for _, c := range f.containerdCalls() {
				if strings.HasPrefix(c, "kill ") {
					kills++
				}
			}
			if kills != tt.kills {
				t.Errorf("%d signals sent (%q); want %d", kills, f.containerdCalls(), tt.kills)
			}
			if got := stopOutcomes(t, reg); got != tt.outcome {
				t.Errorf("outcomes %s, want %s", got, tt.outcome)
			}
			if n := len(f.stopTimeouts); n == 0 || f.stopTimeouts[n-1] != tt.timeout {
				t.Errorf("the runtime's stops had timeouts %v; want the last %d", f.stopTimeouts, tt.timeout)
			}
		})
	}
}

// delivered plays an earlier crishim's delivery to id, as far as calls got.
func (f *targetFakeRuntime) delivered(id string, calls ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers[id].labels = map[string]string{StopSignalDeliveredLabel: "SIGUSR1 2026-11-28T07:00:00Z"}
	f.ctrd.calls = append(f.ctrd.calls, calls...)
}

func (f *targetFakeRuntime) setHooks(onKill, onWait func(id string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctrd.onKill, f.ctrd.onWait = onKill, onWait
}

func (f *targetFakeRuntime) setExitOn(id string, sig syscall.Signal) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers[id].exitOn = sig
}

// exitWhenWaited ends the process of the container someone waits for: it
// finishes its shutdown.
func exitWhenWaited(f *targetFakeRuntime) func(id string) {
	return func(id string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.exitLocked(f.containers[id])
	}
}

// TestStopSignalAcrossModeChanges: what decides a stop is the container's
// annotation, written at create by the crishim of that moment; a crishim
// restarted in another mode, or in front of an upgraded runtime, honours it
// and never hands an emulated container to a runtime that would signal it
// a second time.
func TestStopSignalAcrossModeChanges(t *testing.T) {
	tests := []struct {
		name                  string
		createMode, createRT  string // the crishim and runtime at CreateContainer
		stopMode, stopRT      string // and at StopContainer
		containerdDownAtStart bool
		annotated             bool     // the container was created with crishim's annotation
		calls                 []string // through the containerd API at stop
		timeout               int64    // of the StopContainer the runtime got
	}{
		{
			name:       "emulated, then native",
			createMode: StopSignalEmulate, createRT: "containerd 1.6.20", stopMode: StopSignalNative, stopRT: "containerd 1.6.20",
			annotated: true, calls: []string{labelCall, killCall}, timeout: 0,
		},
		{
			name:       "auto emulated, then the runtime upgraded to one that honours stop_signal",
			createMode: StopSignalAuto, createRT: "containerd 1.6.20", stopMode: StopSignalAuto, stopRT: "containerd 2.3.0",
			annotated: true, calls: []string{labelCall, killCall}, timeout: 0,
		},
		{
			name:       "auto native, then crishim configured to emulate",
			createMode: StopSignalAuto, createRT: "containerd 2.3.0", stopMode: StopSignalEmulate, stopRT: "containerd 2.3.0",
			annotated: false, calls: nil, timeout: 10,
		},
		{
			name:       "native, then emulate",
			createMode: StopSignalNative, createRT: "containerd 1.6.20", stopMode: StopSignalEmulate, stopRT: "containerd 1.6.20",
			annotated: false, calls: nil, timeout: 10,
		},
		{
			name:       "auto with the containerd API down: passed through, then emulated",
			createMode: StopSignalAuto, createRT: "containerd 1.6.20", stopMode: StopSignalEmulate, stopRT: "containerd 1.6.20",
			containerdDownAtStart: true,
			annotated:             false, calls: nil, timeout: 10,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTargetFake()
			f.name, f.version, _ = strings.Cut(tt.createRT, " ")
			if tt.containerdDownAtStart {
				f.ctrd.down = errors.New("connection refused")
			}
			s := signalShim(t, f, tt.createMode, prometheus.NewRegistry())
			resp, err := s.createContainer(context.Background(), stopSignalRequest(runtimeapi.Signal_SIGNAL_SIGUSR1, nil))
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetContainerId()
			if _, err := f.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			_, annotated := f.containers[id].annotations[StopSignalAnnotation]
			f.containers[id].exitOn = syscall.SIGUSR1
			f.name, f.version, _ = strings.Cut(tt.stopRT, " ")
			f.ctrd.down = nil
			f.mu.Unlock()
			if annotated != tt.annotated {
				t.Fatalf("created with crishim's annotation: %v, want %v", annotated, tt.annotated)
			}

			restarted := signalShim(t, f, tt.stopMode, prometheus.NewRegistry())
			if _, err := restarted.signals.stop(context.Background(), stopRequest(id)); err != nil {
				t.Fatalf("StopContainer: %v", err)
			}
			want := make([]string, len(tt.calls))
			for i, c := range tt.calls {
				want[i] = strings.Replace(c, "c1", id, 1)
			}
			if got := f.containerdCalls(); !slices.Equal(got, want) {
				t.Errorf("containerd calls %q, want %q", got, want)
			}
			if !slices.Equal(f.stopTimeouts, []int64{tt.timeout}) {
				t.Errorf("the runtime's stops had timeouts %v, want [%d]", f.stopTimeouts, tt.timeout)
			}
		})
	}
}
