package shim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/shim/crishimv1"
)

// gatedExec is a runtime whose ExecSync reports each call entering, counts
// the calls in flight per container and overall, and answers only once
// released.
type gatedExec struct {
	runtimeapi.RuntimeServiceClient
	entered chan struct{}
	release chan struct{}

	mu              sync.Mutex
	inFlight        map[string]int
	total, maxTotal int
	maxPer          int
}

func newGatedExec() *gatedExec {
	return &gatedExec{entered: make(chan struct{}, 1000), release: make(chan struct{}), inFlight: map[string]int{}}
}

func (f *gatedExec) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest, _ ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error) {
	f.mu.Lock()
	f.inFlight[req.GetContainerId()]++
	f.total++
	f.maxPer = max(f.maxPer, f.inFlight[req.GetContainerId()])
	f.maxTotal = max(f.maxTotal, f.total)
	f.mu.Unlock()
	f.entered <- struct{}{}
	select {
	case <-f.release:
	case <-ctx.Done():
	}
	f.mu.Lock()
	f.inFlight[req.GetContainerId()]--
	f.total--
	f.mu.Unlock()
	return &runtimeapi.ExecSyncResponse{}, nil
}

// TestNotifierRunsBounded: however many runs are asked for at once, at
// most notifyPerContainer execs run in one container and notifyTotal on
// the node; the others wait for a slot (they are seen waiting, then all
// succeed once the execs in flight end).
func TestNotifierRunsBounded(t *testing.T) {
	for _, tc := range []struct {
		name       string
		containers int
		runs       int
		want       int // execs in flight before the release
	}{
		{"one container", 1, 40, notifyPerContainer},
		{"many containers", 40, 2 * 40, notifyTotal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := newGatedExec()
			g := &signalling{rs: rs, log: slog.New(slog.NewTextHandler(io.Discard, nil)), runs: newRunSlots(notifyPerContainer, notifyTotal)}
			waiting := make(chan struct{}, tc.runs)
			g.runs.onWait = func() { waiting <- struct{}{} }
			pod := &runtimeapi.PodSandbox{Id: "pod", Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Namespace: "ns"}}
			runs := make([]notifierRun, tc.runs)
			var wg sync.WaitGroup
			for i := range runs {
				ctr := &runtimeapi.Container{Id: fmt.Sprintf("c%d", i%tc.containers), State: runtimeapi.ContainerState_CONTAINER_RUNNING}
				runs[i] = notifierRun{name: "reload", pod: pod, container: ctr,
					decl: declaration{container: "app", notifier: notifier{exec: []string{"true"}, timeout: time.Hour}},
					out:  &crishimv1.ContainerNotification{}}
				wg.Add(1)
				go func() { defer wg.Done(); g.runNotifier(context.Background(), &runs[i]) }()
			}
			// Each run either enters ExecSync or waits for a slot; unbounded,
			// all would enter.
			timeout := time.After(30 * time.Second)
			entered, waited := 0, 0
			for entered+waited < tc.runs {
				select {
				case <-rs.entered:
					entered++
				case <-waiting:
					waited++
				case <-timeout:
					t.Fatalf("%d runs entered ExecSync and %d wait; want %d in all", entered, waited, tc.runs)
				}
			}
			if entered != tc.want {
				t.Errorf("%d execs at once, want %d (the rest waiting)", entered, tc.want)
			}
			close(rs.release)
			wg.Wait()
			for i, r := range runs {
				if !r.out.GetSucceeded() {
					t.Errorf("run %d: %v", i, r.out.GetError())
				}
			}
			if rs.maxPer > notifyPerContainer || rs.maxTotal > notifyTotal {
				t.Errorf("at most %d execs in one container and %d on the node, want <= %d and %d", rs.maxPer, rs.maxTotal, notifyPerContainer, notifyTotal)
			}
		})
	}
}

// TestNotifierRunWaitTimesOut: a run that gets no slot within its
// notifier's timeout fails with ActionTimeout and never execs.
func TestNotifierRunWaitTimesOut(t *testing.T) {
	rs := newGatedExec()
	defer close(rs.release)
	g := &signalling{rs: rs, log: slog.New(slog.NewTextHandler(io.Discard, nil)), runs: newRunSlots(1, 1)}
	pod := &runtimeapi.PodSandbox{Id: "pod"}
	ctr := &runtimeapi.Container{Id: "c", State: runtimeapi.ContainerState_CONTAINER_RUNNING}
	first := notifierRun{pod: pod, container: ctr, decl: declaration{notifier: notifier{exec: []string{"true"}, timeout: time.Hour}}, out: &crishimv1.ContainerNotification{}}
	go g.runNotifier(context.Background(), &first)
	<-rs.entered
	second := notifierRun{pod: pod, container: ctr, decl: declaration{notifier: notifier{exec: []string{"true"}, timeout: 50 * time.Millisecond}}, out: &crishimv1.ContainerNotification{}}
	g.runNotifier(context.Background(), &second)
	if e := second.out.GetError(); e.GetReason() != reasonActionTime || second.out.GetSucceeded() || second.out.GetStartedAt() != nil {
		t.Errorf("second run: %v, started at %v; want %s and never started", e, second.out.GetStartedAt(), reasonActionTime)
	}
	select {
	case <-rs.entered:
		t.Error("the run that timed out waiting executed")
	default:
	}
}
