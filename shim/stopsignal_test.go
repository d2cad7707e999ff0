package shim

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/metrics"
)

func TestStopSignalMode(t *testing.T) {
	tests := []struct {
		configured string
		runtime    string // "name version"
		containerd bool   // crishim has the containerd API (the fake's)
		effective  string
		reason     string
	}{
		{"auto", "containerd 1.6.20~ds1", false, "pass-through", "containerd 1.6.20~ds1 ignores stop_signal (honoured since 2.3), and crishim cannot emulate it without the containerd API"},
		{"auto", "containerd v2.2.1", false, "pass-through", "ignores stop_signal (honoured since 2.3)"},
		{"auto", "containerd v2.3.0", false, "native", "containerd v2.3.0 honours stop_signal (since 2.3)"},
		{"auto", "containerd 3.0.0", false, "native", "honours stop_signal"},
		{"auto", "cri-o 1.33.0", false, "native", "cri-o 1.33.0 honours stop_signal (since 1.33)"},
		{"auto", "cri-o 1.34.0", false, "native", "honours stop_signal"},
		{"auto", "cri-o 1.32.4", false, "pass-through", "cri-o 1.32.4 ignores stop_signal (honoured since 1.33)"},
		{"auto", "youki-cri 0.1.0", false, "pass-through", `runtime "youki-cri" 0.1.0 is not known to honour stop_signal`},
		{"auto", "containerd dev", false, "pass-through", `version "dev" is not a version crishim can compare`},
		{"auto", "containerd 1.6.20", true, "emulate", "ignores stop_signal (honoured since 2.3); emulated at StopContainer through the containerd API"},
		{"native", "containerd 1.6.20", false, "native", "configured"},
		{"emulate", "containerd 2.3.0", true, "emulate", "configured: delivered at StopContainer"},
		{"emulate", "containerd 1.6.20", false, "pass-through", "--containerd-address is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.configured+" "+tt.runtime, func(t *testing.T) {
			f := newTargetFake()
			f.name, f.version, _ = strings.Cut(tt.runtime, " ")
			s := startSignalShim(t, f, tt.configured, tt.containerd)
			m := s.signals.statusMode(context.Background())
			if m.GetFeature() != "stop-signal" || m.GetConfigured() != tt.configured || m.GetEffective() != tt.effective || !strings.Contains(m.GetReason(), tt.reason) {
				t.Errorf("mode %+v; want effective %s with %q", m, tt.effective, tt.reason)
			}
		})
	}
}

// startSignalShim is startTargetShim with a stop-signal mode; containerd
// gives the shim the containerd API of f's fake containerd.
func startSignalShim(t *testing.T, f *targetFakeRuntime, mode string, containerd bool) *Shim {
	t.Helper()
	s := startTargetShim(t, f, "native")
	s.opts.StopSignalMode = mode
	s.signals = s.newSignalling()
	if containerd {
		s.signals.ctrd = f.containerd()
	}
	return s
}

func stopSignalRequest(sig runtimeapi.Signal, annotations map[string]string) *runtimeapi.CreateContainerRequest {
	return &runtimeapi.CreateContainerRequest{PodSandboxId: "pod1", Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, StopSignal: sig, Annotations: annotations,
	}}
}

func TestCreateContainerWithStopSignal(t *testing.T) {
	tests := []struct {
		name       string
		mode       string
		containerd bool
		req        *runtimeapi.CreateContainerRequest
		code       codes.Code
		annotation string // as forwarded; empty: none
	}{
		{name: "emulate", mode: "emulate", containerd: true, req: stopSignalRequest(runtimeapi.Signal_SIGNAL_SIGUSR1, nil), annotation: "SIGUSR1"},
		{name: "emulate, real-time signal", mode: "emulate", containerd: true, req: stopSignalRequest(runtimeapi.Signal_SIGNAL_SIGRTMINPLUS3, nil), annotation: "SIGRTMIN+3"},
		{name: "emulate, no stop signal", mode: "emulate", containerd: true, req: stopSignalRequest(runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, nil)},
		{name: "native", mode: "native", req: stopSignalRequest(runtimeapi.Signal_SIGNAL_SIGUSR1, nil)},
		{name: "pass-through", mode: "auto", req: stopSignalRequest(runtimeapi.Signal_SIGNAL_SIGUSR1, nil)},
		{
			name: "crishim's annotation from a client", mode: "emulate", containerd: true,
			req:  stopSignalRequest(runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, map[string]string{StopSignalAnnotation: "SIGKILL"}),
			code: codes.InvalidArgument,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTargetFake()
			s := startSignalShim(t, f, tt.mode, tt.containerd)
			_, err := s.createContainer(context.Background(), tt.req)
			if status.Code(err) != tt.code {
				t.Fatalf("CreateContainer: %v; want %s", err, tt.code)
			}
			if tt.code != codes.OK {
				if !strings.Contains(err.Error(), `config.annotations["crishim.io/stop-signal"]`) || len(f.creates) != 0 {
					t.Errorf("error %v, %d creates reached the runtime", err, len(f.creates))
				}
				return
			}
			fwd := f.creates[0].GetConfig()
			if got := fwd.GetAnnotations()[StopSignalAnnotation]; got != tt.annotation {
				t.Errorf("forwarded annotation %q, want %q", got, tt.annotation)
			}
			if fwd.GetStopSignal() != tt.req.GetConfig().GetStopSignal() {
				t.Errorf("forwarded stop_signal %s, want it unchanged", fwd.GetStopSignal())
			}
		})
	}
}

func TestContainerStatusReportsStopSignal(t *testing.T) {
	f := newTargetFake()
	f.add("plain", "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
	f.add("emulated", "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
	f.containers["emulated"].annotations = map[string]string{StopSignalAnnotation: "SIGRTMAX-1"}
	f.add("garbled", "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
	f.containers["garbled"].annotations = map[string]string{StopSignalAnnotation: "SIGNOPE"}
	s := startSignalShim(t, f, "auto", false)
	for id, want := range map[string]runtimeapi.Signal{
		"plain":    runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT,
		"emulated": runtimeapi.Signal_SIGNAL_SIGRTMAXMINUS1,
		"garbled":  runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT,
	} {
		resp, err := s.signals.rs.ContainerStatus(context.Background(), &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatal(err)
		}
		msg, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		sent := bytes.Clone(msg)
		out := s.signals.rewriteStatus(msg)
		if !bytes.Equal(msg, sent) {
			t.Fatalf("%s: the rewrite wrote into the relay's bytes", id)
		}
		if !bytes.HasPrefix(out, msg) {
			t.Errorf("%s: the runtime's bytes were re-encoded, not kept", id)
		}
		var got runtimeapi.ContainerStatusResponse
		if err := proto.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if got.GetStatus().GetStopSignal() != want {
			t.Errorf("%s: stop_signal %s, want %s", id, got.GetStatus().GetStopSignal(), want)
		}
		resp.Status.StopSignal = want
		if !proto.Equal(&got, resp) {
			t.Errorf("%s: the answer changed beyond stop_signal:\n%v\nwant\n%v", id, &got, resp)
		}
		if want == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT && len(out) != len(msg) {
			t.Errorf("%s: %d bytes added to an answer with nothing to add", id, len(out)-len(msg))
		}
	}
}

func TestContainerStatusRewriteKeepsTheRuntimesOwnAnswer(t *testing.T) {
	g := &signalling{}
	set := &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
		Id: "c", StopSignal: runtimeapi.Signal_SIGNAL_SIGTERM,
		Annotations: map[string]string{StopSignalAnnotation: "SIGUSR1"},
	}}
	infoOnly := &runtimeapi.ContainerStatusResponse{
		Status: &runtimeapi.ContainerStatus{Id: "c"},
		Info:   map[string]string{"info": `{"annotations":{"` + StopSignalAnnotation + `":"SIGUSR1"}}`},
	}
	for name, m := range map[string]*runtimeapi.ContainerStatusResponse{"runtime set it": set, "key in info only": infoOnly} {
		msg, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if out := g.rewriteStatus(msg); !bytes.Equal(out, msg) {
			t.Errorf("%s: answer changed", name)
		}
	}
	garbage := append([]byte{0xff, 0xff}, StopSignalAnnotation...)
	if out := g.rewriteStatus(garbage); !bytes.Equal(out, garbage) {
		t.Error("a malformed answer was changed; it must reach the kubelet as it came")
	}
}

// TestStopWithoutContainerdAPI: a container whose stop signal crishim
// emulates, stopped by a crishim without the containerd API, is stopped by
// the runtime as asked rather than left running.
func TestStopWithoutContainerdAPI(t *testing.T) {
	f := newTargetFake()
	f.add("emulated", "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
	f.containers["emulated"].annotations = map[string]string{StopSignalAnnotation: "SIGUSR1"}
	f.add("exited", "pod1", runtimeapi.ContainerState_CONTAINER_EXITED)
	f.containers["exited"].annotations = map[string]string{StopSignalAnnotation: "SIGUSR1"}
	s := startSignalShim(t, f, "auto", false)
	for _, id := range []string{"emulated", "exited", "nosuch"} {
		if _, err := s.signals.stop(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: 10}); err != nil {
			t.Errorf("StopContainer %s: %v", id, err)
		}
	}
	if strings.Join(f.stopped, ",") != "emulated,exited,nosuch" {
		t.Errorf("the runtime stopped %v", f.stopped)
	}
}

// TestStopOfAnEmulatedContainerIsCrishimsInEveryMode: a container created
// while crishim emulated its stop signal keeps crishim's annotation, and a
// crishim restarted in any mode must finish its stop itself (the delivery
// record says whether the signal went already). Relayed instead, a runtime
// that honours stop_signal (containerd 2.3+) would send it a second time.
func TestStopOfAnEmulatedContainerIsCrishimsInEveryMode(t *testing.T) {
	for _, mode := range []string{StopSignalAuto, StopSignalNative, StopSignalEmulate} {
		t.Run(mode, func(t *testing.T) {
			f := newTargetFake()
			f.add("emulated", "pod1", runtimeapi.ContainerState_CONTAINER_RUNNING)
			f.containers["emulated"].annotations = map[string]string{StopSignalAnnotation: "SIGUSR1"}
			reg := prometheus.NewRegistry()
			m := metrics.NewSignals(reg)
			s := New(serveFakeRuntime(t, f), Options{StopSignalMode: mode, SignalMetrics: m})
			rs := serveShim(t, s)
			if _, err := rs.StopContainer(context.Background(), &runtimeapi.StopContainerRequest{ContainerId: "emulated", Timeout: 10}); err != nil {
				t.Fatal(err)
			}
			// Without the containerd API crishim cannot deliver; what
			// matters is that the stop was crishim's to decide.
			want := `
# HELP crishim_stop_signal_stops_total StopContainer calls for containers whose stop signal crishim emulates, by outcome (exited, killed, already_delivered, not_running, unemulated, delivery_failed).
# TYPE crishim_stop_signal_stops_total counter
crishim_stop_signal_stops_total{outcome="unemulated"} 1
`
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "crishim_stop_signal_stops_total"); err != nil {
				t.Error(err)
			}
		})
	}
}
