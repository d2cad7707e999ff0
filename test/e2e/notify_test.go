package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/shim"
	"github.com/crishim/crishim/shim/crishimv1"
)

// notifierPod declares one notifier per container of the test table, each
// named after its case, and a malformed one: crishim never reads pod
// annotations at RunPodSandbox, so the pod runs regardless.
var notifierPod = map[string]string{
	// The quiesce workflow in small: the action starts a flush that takes
	// a moment, the probe waits for its result.
	"db.quiesce": `{"exec":["sh","-c","(sleep 1; touch /tmp/quiesced) >/dev/null 2>&1 &"],"timeoutSeconds":20,"probe":{"exec":["test","-f","/tmp/quiesced"]}}`,
	"web.reload": `{"signal":"SIGHUP"}`,
	"db.slow":    `{"exec":["sleep","30"],"timeoutSeconds":1}`,
	"db.fail":    `{"exec":["sh","-c","echo disk full >&2; exit 3"]}`,
	"db.stuck":   `{"exec":["true"],"timeoutSeconds":2,"probe":{"exec":["test","-f","/never"]}}`,
	"web.broken": `{"exec":`,
	"ghost.gone": `{"signal":"SIGHUP"}`,
}

func TestNotifiers(t *testing.T) {
	p := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, p.Endpoint)
	pod := podConfig(t, uniqueName("notify"), nil)
	for k, v := range notifierPod {
		pod.Annotations[shim.NotifierAnnotationPrefix+k] = v
	}
	podID := runPod(t, rs, pod)
	dbID := startContainer(t, rs, podID, pod, containerConfig("db", "exec sleep 3600", nil))
	dir, webID := trappingContainer(t, rs, podID, pod, "web", runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT, "", "HUP")
	api := crishimAPI(t, p.Endpoint)

	tests := []struct {
		notifier     string
		container    string
		id           string // empty: no such container
		started      bool
		succeeded    bool
		kind, reason string
		msg          string
	}{
		{notifier: "quiesce", container: "db", id: dbID, started: true, succeeded: true},
		{notifier: "reload", container: "web", id: webID, started: true, succeeded: true},
		{notifier: "slow", container: "db", id: dbID, started: true, kind: "Timeout", reason: "ActionTimeout", msg: "did not finish within 1s"},
		{notifier: "fail", container: "db", id: dbID, started: true, kind: "Error", reason: "ActionFailed", msg: "exited with code 3: disk full"},
		{notifier: "stuck", container: "db", id: dbID, started: true, kind: "Timeout", reason: "ProbeFailed", msg: "did not succeed in time; last attempt: exited with code 1"},
		{notifier: "broken", container: "web", id: webID, kind: "Error", reason: "MalformedAnnotation", msg: "annotation notifier.crishim.io/web.broken"},
		{notifier: "gone", container: "ghost", kind: "Error", reason: "ContainerNotRunning", msg: `no container named "ghost"`},
	}
	for _, tt := range tests {
		t.Run(tt.notifier, func(t *testing.T) {
			resp, err := api.Notify(context.Background(), &crishimv1.NotifyRequest{Notifier: tt.notifier, PodSandboxId: podID[:12]})
			if err != nil {
				t.Fatalf("Notify: %v", err)
			}
			if len(resp.GetPods()) != 1 || len(resp.GetPods()[0].GetContainers()) != 1 {
				t.Fatalf("answer %v; want one pod with one container", resp)
			}
			pn := resp.GetPods()[0]
			if pn.GetPodSandboxId() != podID || pn.GetPodName() != pod.Metadata.Name || pn.GetPodNamespace() != "e2e" {
				t.Errorf("pod %v", pn)
			}
			c := pn.GetContainers()[0]
			if c.GetContainerName() != tt.container || c.GetContainerId() != tt.id || c.GetSucceeded() != tt.succeeded {
				t.Errorf("container %v; want %s (%s) succeeded=%v", c, tt.container, tt.id, tt.succeeded)
			}
			if started := c.GetStartedAt() != nil; started != tt.started {
				t.Errorf("started_at %v; want it set exactly when the action ran", c.GetStartedAt())
			}
			e := c.GetError()
			if tt.succeeded {
				if e != nil {
					t.Errorf("error %v on success", e)
				}
				return
			}
			if e.GetType() != tt.kind || e.GetReason() != tt.reason || !strings.Contains(e.GetMessage(), tt.msg) || e.GetTime() == nil {
				t.Errorf("error %v; want %s/%s with %q", e, tt.kind, tt.reason, tt.msg)
			}
		})
	}
	if lines := signalLines(t, dir); count(lines, "HUP") != 1 {
		t.Errorf("web received %q; want HUP once", lines)
	}

	t.Run("action is not retried", func(t *testing.T) {
		out := execSync(t, rs, dbID, "sh", "-c", "ls /tmp")
		if strings.Count(out, "quiesced") != 1 {
			t.Errorf("/tmp: %q", out)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tt := range []struct {
			req  *crishimv1.NotifyRequest
			code codes.Code
			msg  string
		}{
			{&crishimv1.NotifyRequest{Notifier: "nosuch", PodSandboxId: podID}, codes.NotFound, `declares "nosuch"`},
			{&crishimv1.NotifyRequest{Notifier: "reload", PodSandboxId: "0123456789abcdef"}, codes.NotFound, "pod_sandbox_id"},
			{&crishimv1.NotifyRequest{Notifier: "reload", LabelSelector: map[string]string{"nosuch": "x"}}, codes.NotFound, "label_selector"},
			{&crishimv1.NotifyRequest{Notifier: "reload"}, codes.InvalidArgument, "exactly one"},
		} {
			_, err := api.Notify(context.Background(), tt.req)
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Notify(%v): %v; want %s with %q", tt.req, err, tt.code, tt.msg)
			}
		}
	})

	t.Run("crishimctl", func(t *testing.T) {
		out, err := crishimctl(t, p.Endpoint, "notify", "--pod", podID, "reload")
		if err != nil || !strings.Contains(out, "web") || !strings.Contains(out, "Succeeded") {
			t.Errorf("crishimctl notify reload: %v\n%s", err, out)
		}
		out, err = crishimctl(t, p.Endpoint, "notify", "--pod", podID, "-o", "json", "fail")
		if err == nil {
			t.Errorf("crishimctl notify of a failing notifier exited 0")
		}
		var resp struct {
			Pods []struct {
				Containers []struct {
					ContainerName string `json:"containerName"`
					Error         struct{ Type, Reason string }
				}
			}
		}
		jsonPart := out[:strings.LastIndex(out, "}")+1]
		if err := json.Unmarshal([]byte(jsonPart), &resp); err != nil || len(resp.Pods) != 1 || resp.Pods[0].Containers[0].Error.Reason != "ActionFailed" {
			t.Errorf("crishimctl notify -o json: %v\n%s", err, out)
		}
	})

	m := metricsText(t, p.Metrics)
	for _, want := range []string{
		`crishim_notifier_runs_total{action="exec",reason="",result="succeeded"} 1`,
		`crishim_notifier_runs_total{action="signal",reason="",result="succeeded"} 2`, // and once by crishimctl
		`crishim_notifier_runs_total{action="exec",reason="ActionTimeout",result="Timeout"} 1`,
		`crishim_notifier_runs_total{action="none",reason="MalformedAnnotation",result="Error"} 1`,
		`crishim_signal_deliveries_total{code="OK",origin="notifier",signal="SIGHUP",via="` + signalVia() + `"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestNotifySelector: a label selector picks every ready pod with the
// labels, and only those.
func TestNotifySelector(t *testing.T) {
	p := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, p.Endpoint)
	group := uniqueName("group")
	var want []string
	for i := range 4 {
		labels := map[string]string{"group": group, "tier": "db"}
		if i == 3 {
			labels["tier"] = "web" // not selected
		}
		pod := podConfig(t, fmt.Sprintf("%s-%d", group, i), labels)
		pod.Annotations[shim.NotifierAnnotationPrefix+"app.mark"] = `{"exec":["touch","/tmp/marked"]}`
		podID := runPod(t, rs, pod)
		startContainer(t, rs, podID, pod, containerConfig("app", "exec sleep 3600", nil))
		if i < 3 {
			want = append(want, podID)
		}
	}
	resp, err := crishimAPI(t, p.Endpoint).Notify(context.Background(), &crishimv1.NotifyRequest{
		Notifier: "mark", LabelSelector: map[string]string{"group": group, "tier": "db"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, pn := range resp.GetPods() {
		got = append(got, pn.GetPodSandboxId())
		if len(pn.GetContainers()) != 1 || !pn.GetContainers()[0].GetSucceeded() {
			t.Errorf("pod %s: %v", pn.GetPodName(), pn.GetContainers())
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("notified pods %v; want %v (in name order)", got, want)
	}
	out, err := crishimctl(t, p.Endpoint, "notify", "--selector", "group="+group+",tier=db", "mark")
	if err != nil || strings.Count(out, "Succeeded") != 3 {
		t.Errorf("crishimctl notify --selector: %v\n%s", err, out)
	}
}
