package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/caller"
	"github.com/crishim/crishim/test/crictl"
)

var (
	crictlOnce sync.Once
	crictlPath string
	crictlErr  error
)

// crictlBinary is an unmodified crictl, built once per run (cached across
// runs).
func crictlBinary(t *testing.T) string {
	t.Helper()
	crictlOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		crictlPath, crictlErr = crictl.Build(ctx)
	})
	if crictlErr != nil {
		t.Fatal(crictlErr)
	}
	return crictlPath
}

// operatorLoginUID is the login uid of the operator the tests play.
const operatorLoginUID = 4242

// crictlAsOperator runs crictl against endpoint as an operator logged in
// with operatorLoginUID, then root (crictl.RunAsOperator).
func crictlAsOperator(t *testing.T, endpoint string, args ...string) string {
	t.Helper()
	bin := crictlBinary(t)
	if _, err := os.Stat("/proc/self/loginuid"); err != nil {
		t.Skipf("no /proc/self/loginuid (a kernel without audit): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := crictl.RunAsOperator(ctx, bin, operatorLoginUID, endpoint, args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// isOperatorsCrictl says whether p is crictl run by crictlAsOperator with
// args among its arguments.
func isOperatorsCrictl(p *caller.Process, args ...string) bool {
	return p != nil && p.LoginUID != nil && *p.LoginUID == operatorLoginUID && p.SessionID != nil &&
		p.UID == 0 && !p.Kubelet && !p.Exited && filepath.Base(p.Exe) == "crictl" && len(p.Cmdline) > 0 &&
		containsAll(p.Cmdline, args)
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// TestCrictlExecFromALoginSession: an operator's `crictl exec` (logged in,
// then root) is recorded with the login uid and session that name the
// person, crictl's command line, the container's full ID (crictl was given
// a prefix) and the command with its exit code; the CRI Exec call that
// obtained the stream is a criCall event of the same caller.
func TestCrictlExecFromALoginSession(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	d := startCrishim(t, testbed.Endpoint, "--audit-log", path)
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "login", sleeperScript)

	out := crictlAsOperator(t, d.Endpoint, "exec", ctrID[:12], "sh", "-c", "echo from-crictl")
	if !strings.Contains(out, "from-crictl") {
		t.Fatalf("crictl exec printed %q", out)
	}
	end := auditEvent(t, path, "the exec's ended event", func(ev audit.Event) bool {
		return ev.Kind == audit.KindExec && ev.Stage == audit.StageEnded && slices.Contains(ev.Argv, "echo from-crictl")
	})
	if !isOperatorsCrictl(end.Caller, "exec") || end.ContainerID != ctrID || end.ExitCode == nil || *end.ExitCode != 0 {
		t.Errorf("exec event %+v, caller %+v: want the operator's crictl (login uid %d), container %s, exit code 0", end, end.Caller, operatorLoginUID, ctrID)
	}
	call := auditEvent(t, path, "the Exec call's event", func(ev audit.Event) bool {
		return ev.Kind == audit.KindCRICall && ev.Method == runtimeapi.RuntimeService_Exec_FullMethodName && ev.Stage == audit.StageEnded
	})
	if !isOperatorsCrictl(call.Caller, "exec") || call.ContainerID != ctrID || call.Code != "OK" {
		t.Errorf("Exec call event %+v, caller %+v", call, call.Caller)
	}
}

// TestCrictlRmIsAuditedWithItsCaller: `crictl stop` and `crictl rm` by hand
// are audited (kind criCall) with their caller, the full ID of the
// container crictl named by a prefix, and the code;
// `crictl ps` (it only reads) is not. The by-caller metric counts them as
// "other".
func TestCrictlRmIsAuditedWithItsCaller(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	d := startCrishim(t, testbed.Endpoint, "--audit-log", path)
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "rm", sleeperScript)

	crictlAsOperator(t, d.Endpoint, "ps", "-a")
	crictlAsOperator(t, d.Endpoint, "stop", "--timeout", "0", ctrID[:12])
	crictlAsOperator(t, d.Endpoint, "rm", ctrID[:12])

	for _, m := range []struct {
		method, arg string
	}{
		{runtimeapi.RuntimeService_StopContainer_FullMethodName, "stop"},
		{runtimeapi.RuntimeService_RemoveContainer_FullMethodName, "rm"},
	} {
		ev := auditEvent(t, path, m.method+"'s ended event", func(ev audit.Event) bool {
			return ev.Kind == audit.KindCRICall && ev.Method == m.method && ev.Stage == audit.StageEnded && isOperatorsCrictl(ev.Caller, m.arg)
		})
		if ev.ContainerID != ctrID || ev.ContainerName != "app" || ev.Code != "OK" {
			t.Errorf("%s event %+v: want container %s (app), code OK", m.method, ev, ctrID)
		}
	}
	for _, ev := range readAudit(t, path) {
		if ev.Kind == audit.KindCRICall && isOperatorsCrictl(ev.Caller) && strings.HasPrefix(ev.Method, "/runtime.v1.RuntimeService/List") {
			t.Errorf("a read-only call is audited: %+v", ev)
		}
	}
	values := scrape(t, d.Metrics)
	for _, method := range []string{runtimeapi.RuntimeService_RemoveContainer_FullMethodName, runtimeapi.RuntimeService_ListContainers_FullMethodName} {
		sample := fmt.Sprintf(`crishim_cri_calls_by_caller_total{caller="other",code="OK",method=%q}`, method)
		if values[sample] < 1 {
			t.Errorf("%s = %v, want at least 1", sample, values[sample])
		}
		if v, ok := values[strings.Replace(sample, "other", "kubelet", 1)]; ok {
			t.Errorf("no kubelet called, but the kubelet's %s = %v", method, v)
		}
	}
}

// TestCrictlInspectIsAudited: at --audit-cri-calls mutating (the default),
// an operator's `crictl inspect`, a verbose ContainerStatus whose answer
// holds the container's whole config (its environment too), is audited
// with its caller and the container; the same read without verbose, as
// `crictl ps` lists, is not.
func TestCrictlInspectIsAudited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	d := startCrishim(t, testbed.Endpoint, "--audit-log", path)
	rs, _ := criClients(t, d.Endpoint)
	_, _, ctrID := podWithContainer(t, rs, "inspect", sleeperScript)

	if out := crictlAsOperator(t, d.Endpoint, "inspect", ctrID[:12]); !strings.Contains(out, ctrID) {
		t.Fatalf("crictl inspect printed %q, want the container", out)
	}
	method := runtimeapi.RuntimeService_ContainerStatus_FullMethodName
	ev := auditEvent(t, path, "crictl inspect's ended event", func(ev audit.Event) bool {
		return ev.Kind == audit.KindCRICall && ev.Method == method && ev.Stage == audit.StageEnded && isOperatorsCrictl(ev.Caller, "inspect")
	})
	if ev.ContainerID != ctrID || ev.ContainerName != "app" || ev.Code != "OK" {
		t.Errorf("crictl inspect's event %+v: want container %s (app), code OK", ev, ctrID)
	}
	// This test's own CRI client (not the kubelet either) reads without
	// verbose: not audited (an audited call's events are written before
	// it answers).
	if _, err := rs.ContainerStatus(t.Context(), ctrID, false); err != nil {
		t.Fatal(err)
	}
	for _, ev := range readAudit(t, path) {
		if ev.Kind == audit.KindCRICall && ev.Method == method && !isOperatorsCrictl(ev.Caller, "inspect") {
			t.Errorf("a ContainerStatus without verbose is audited: %+v", ev)
		}
	}
}
