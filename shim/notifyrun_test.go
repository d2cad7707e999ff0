package shim

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// scriptedExec answers ExecSync from a script, one answer per call (the
// last one repeats); no other method may be called.
type scriptedExec struct {
	runtimeapi.RuntimeServiceClient
	answers []func(ctx context.Context) (*runtimeapi.ExecSyncResponse, error)
	calls   int
}

func (f *scriptedExec) ExecSync(ctx context.Context, _ *runtimeapi.ExecSyncRequest, _ ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error) {
	a := f.answers[min(f.calls, len(f.answers)-1)]
	f.calls++
	return a(ctx)
}

// A probe attempt cut short by the timeout must not hide why the probe
// fails: the message names the last attempt that finished.
func TestProbeReportsTheLastFinishedAttempt(t *testing.T) {
	exitOne := func(context.Context) (*runtimeapi.ExecSyncResponse, error) {
		return &runtimeapi.ExecSyncResponse{ExitCode: 1}, nil
	}
	hang := func(ctx context.Context) (*runtimeapi.ExecSyncResponse, error) {
		<-ctx.Done()
		return nil, status.Error(codes.DeadlineExceeded, "timeout")
	}
	for name, tc := range map[string]struct {
		answers []func(context.Context) (*runtimeapi.ExecSyncResponse, error)
		want    string
	}{
		"cut after a failure": {[]func(context.Context) (*runtimeapi.ExecSyncResponse, error){exitOne, hang}, "last attempt: exited with code 1"},
		"every attempt cut":   {[]func(context.Context) (*runtimeapi.ExecSyncResponse, error){hang}, "last attempt: the last attempt did not finish in time"},
	} {
		t.Run(name, func(t *testing.T) {
			g := &signalling{rs: &scriptedExec{answers: tc.answers}}
			fail := g.probe(context.Background(), "ctr", []string{"test", "-f", "/ready"}, time.Now().Add(3*probeInterval/2))
			if fail == nil || !strings.Contains(fail.message, tc.want) {
				t.Errorf("probe failure %+v, want a message with %q", fail, tc.want)
			}
		})
	}
}

// TestExecTimeoutAsCRIOReportsIt: CRI-O answers an ExecSync that outlives its timeout with
// exit code -1 ("command timed out") where containerd answers DeadlineExceeded; the
// notifier run and the probe must call both a timeout, and a real failure still a failure.
func TestExecTimeoutAsCRIOReportsIt(t *testing.T) {
	timedOut := func(ctx context.Context) (*runtimeapi.ExecSyncResponse, error) {
		<-ctx.Done() // CRI-O answers once the exec's own timeout has passed
		return &runtimeapi.ExecSyncResponse{ExitCode: -1, Stderr: []byte("command timed out")}, nil
	}
	exitOne := func(context.Context) (*runtimeapi.ExecSyncResponse, error) {
		return &runtimeapi.ExecSyncResponse{ExitCode: 1, Stderr: []byte("no such file")}, nil
	}
	started := time.Now().Add(-2 * time.Second)
	if !execTimedOut(&runtimeapi.ExecSyncResponse{ExitCode: -1}, started, time.Second) {
		t.Error("exit -1 after the timeout: not a timeout")
	}
	// conmon's whole-second timer: CRI-O answered 0.91 s into a 1 s timeout.
	if !execTimedOut(&runtimeapi.ExecSyncResponse{ExitCode: -1}, time.Now().Add(-910*time.Millisecond), time.Second) {
		t.Error("exit -1 0.91 s into a 1 s timeout (conmon's timer fires on a whole second): not a timeout")
	}
	if execTimedOut(&runtimeapi.ExecSyncResponse{ExitCode: -1}, time.Now(), time.Hour) {
		t.Error("exit -1 before the timeout: a timeout")
	}
	if execTimedOut(&runtimeapi.ExecSyncResponse{ExitCode: 137}, started, time.Second) {
		t.Error("exit 137 (the command was killed by someone else): a timeout")
	}

	g := &signalling{rs: &scriptedExec{answers: []func(context.Context) (*runtimeapi.ExecSyncResponse, error){exitOne, timedOut}}}
	fail := g.probe(context.Background(), "ctr", []string{"test", "-f", "/ready"}, time.Now().Add(3*probeInterval/2))
	if fail == nil || !strings.Contains(fail.message, "last attempt: exited with code 1: no such file") {
		t.Errorf("probe failure %+v: want the last finished attempt, not the timed-out one", fail)
	}
}
