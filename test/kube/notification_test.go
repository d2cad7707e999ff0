package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/notification/v1alpha1"
	"github.com/crishim/crishim/test/crishimproc"
	"github.com/crishim/crishim/test/harness"
)

// notifierAnnotations are the pod owner's declarations every pod of the test carries. Each
// exec appends to a file, so a second run would show as a second line.
var notifierAnnotations = map[string]string{
	"notifier.crishim.io/main.quiesce": `{"exec":["sh","-c","echo run >> /tmp/quiesce"]}`,
	"notifier.crishim.io/main.fail":    `{"exec":["sh","-c","echo disk full >&2; exit 3"]}`,
	"notifier.crishim.io/main.stuck":   `{"exec":["true"],"timeoutSeconds":2,"probe":{"exec":["test","-f","/never"]}}`,
	"notifier.crishim.io/main.mark":    `{"exec":["true"]}`,
}

// TestNotificationAcrossTwoNodes: a Notification selects a kubelet pod on the test node and
// a pod on a second "node" (a second crishim with its own --node-name in front of a second
// containerd); each node writes its own entry, the conditions say what happened, failures
// and timeouts show in the entries, a crishim restart runs nothing twice, and expired
// Notifications are deleted.
func TestNotificationAcrossTwoNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	group := uniqueName("notif")
	dyn := dynamicClient(t, testNode.Kubeconfig)

	// Node A: the kubelet's pod.
	meta := "  annotations:\n"
	for k, v := range notifierAnnotations {
		meta += fmt.Sprintf("    %s: '%s'\n", k, v)
	}
	apply(t, strings.Replace(podManifest(group+"-a", meta, "", "main", "exec sleep 3600"), "app: "+group+"-a", "app: "+group, 1))
	waitReady(t, group+"-a")

	// Node B: a second containerd and crishim, with the identity of a node.
	b := startSecondNode(t, ctx)
	_, ctrB := b.runPod(t, ctx, group+"-b", map[string]string{"app": group})

	// One notification per notifier; wait for each to complete.
	final := map[string]*v1alpha1.Notification{}
	for _, name := range []string{"quiesce", "fail", "stuck"} {
		obj := group + "-" + name
		createNotification(t, obj, name, group)
		// Succeeded turns False as soon as one node's entry failed, so wait for both
		// nodes' results, not for the condition.
		final[name] = waitNotification(t, ctx, dyn, obj, func(n *v1alpha1.Notification) bool {
			if len(n.Status.PodNotificationStatuses) != 2 {
				return false
			}
			for _, e := range n.Status.PodNotificationStatuses {
				for _, s := range e.ContainerNotificationStatuses {
					if !s.Succeed && s.Error == nil {
						return false
					}
				}
			}
			c := meta2(n, v1alpha1.ConditionSucceeded)
			return c != nil && c.Status != metav1.ConditionUnknown
		})
	}

	t.Run("both nodes record their pods", func(t *testing.T) {
		n := final["quiesce"]
		nodes := map[string]string{}
		for _, e := range n.Status.PodNotificationStatuses {
			nodes[e.NodeName] = e.PodName
			if len(e.ContainerNotificationStatuses) != 1 || !e.ContainerNotificationStatuses[0].Succeed || e.ContainerNotificationStatuses[0].Timestamp == nil {
				t.Errorf("entry %+v: want one succeeded container with a start time", e)
			}
		}
		if nodes[testNode.Name] != group+"-a" || nodes[b.name] != group+"-b" {
			t.Errorf("entries by node %v, want %s: %s-a and %s: %s-b", nodes, testNode.Name, group, b.name, group)
		}
		if c := meta2(n, v1alpha1.ConditionSucceeded); c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonAllSucceeded {
			t.Errorf("Succeeded %+v", c)
		}
		if c := meta2(n, v1alpha1.ConditionTriggered); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("Triggered %+v", c)
		}
	})
	t.Run("a failing notifier", func(t *testing.T) {
		checkFailed(t, final["fail"], v1alpha1.ErrorTypeError, "ActionFailed", "disk full")
		// Events leave through the recorder's broadcaster, after the status is written.
		eventually(t, 30*time.Second, func() error {
			out := kubectl(t, "get", "events", "--field-selector", "involvedObject.name="+group+"-fail", "-o", "jsonpath={.items[*].reason}")
			if !strings.Contains(out, v1alpha1.ReasonFailed) {
				return fmt.Errorf("no %s Event on the Notification: %q", v1alpha1.ReasonFailed, out)
			}
			return nil
		})
	})
	t.Run("a stuck notifier", func(t *testing.T) {
		checkFailed(t, final["stuck"], v1alpha1.ErrorTypeTimeout, "ProbeFailed", "did not succeed in time")
	})
	t.Run("nothing selected", func(t *testing.T) {
		obj := group + "-none"
		createNotification(t, obj, "quiesce", group+"-nobody")
		n := waitNotification(t, ctx, dyn, obj, func(n *v1alpha1.Notification) bool { return meta2(n, v1alpha1.ConditionTriggered) != nil })
		if c := meta2(n, v1alpha1.ConditionTriggered); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonNoSelectedPods || !strings.Contains(c.Message, `"quiesce"`) {
			t.Errorf("Triggered %+v, want False %s naming the notifier", c, v1alpha1.ReasonNoSelectedPods)
		}
		if len(n.Status.PodNotificationStatuses) != 0 {
			t.Errorf("entries %+v, want none", n.Status.PodNotificationStatuses)
		}
	})
	t.Run("restarts run nothing twice", func(t *testing.T) {
		if err := testNode.RestartCrishim(ctx, false); err != nil {
			t.Fatal(err)
		}
		b.restart(t)
		// The signal that both restarted controllers have looked at every Notification: a
		// new one, created now, completed by both. Each controller queues the Notifications
		// of its first list before it starts working and before any later one, and takes
		// them in order, so by the time it has run the new one it has taken up the old ones;
		// and those are completed, which a controller reconciles without running anything.
		obj := group + "-mark"
		createNotification(t, obj, "mark", group)
		waitNotification(t, ctx, dyn, obj, func(n *v1alpha1.Notification) bool {
			done := 0
			for _, e := range n.Status.PodNotificationStatuses {
				if len(e.ContainerNotificationStatuses) == 1 && e.ContainerNotificationStatuses[0].Succeed {
					done++
				}
			}
			return done == 2
		})
		// kubectl exec goes through the kubelet, whose connection to the restarted
		// crishim may still be in grpc-go's reconnect backoff: only a failed exec is
		// tried again, never a wrong count.
		var out string
		eventually(t, time.Minute, func() error {
			o, stderr, code := kubectlEnv(t, nil, "", "exec", group+"-a", "--", "cat", "/tmp/quiesce")
			if code != 0 {
				return fmt.Errorf("kubectl exec: exit %d, %s", code, stderr)
			}
			out = o
			return nil
		})
		if out != "run\n" {
			t.Errorf("node A ran quiesce %q times", out)
		}
		if out := b.exec(t, ctx, ctrB, "cat", "/tmp/quiesce"); out != "run\n" {
			t.Errorf("node B ran quiesce %q times", out)
		}
	})
	t.Run("expired notifications are deleted", func(t *testing.T) {
		// Both nodes' crishims get a short expiry; several nodes deleting at once is fine.
		if err := testNode.RestartCrishim(ctx, false, "--notification-gc-after=3s"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = testNode.RestartCrishim(context.Background(), false) })
		b.restart(t, "--notification-gc-after=3s")
		for _, name := range []string{"quiesce", "fail", "stuck", "none", "mark"} {
			obj := group + "-" + name
			eventually(t, time.Minute, func() error {
				_, err := dyn.Resource(v1alpha1.Resource).Namespace("default").Get(ctx, obj, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return fmt.Errorf("notification %s still there (%v)", obj, err)
			})
		}
	})
}

func meta2(n *v1alpha1.Notification, typ string) *metav1.Condition {
	return meta.FindStatusCondition(n.Status.Conditions, typ)
}

func checkFailed(t *testing.T, n *v1alpha1.Notification, errType, reason, msg string) {
	t.Helper()
	c := meta2(n, v1alpha1.ConditionSucceeded)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonFailed {
		t.Errorf("%s: Succeeded %+v, want False %s", n.Name, c, v1alpha1.ReasonFailed)
	}
	for _, e := range n.Status.PodNotificationStatuses {
		for _, s := range e.ContainerNotificationStatuses {
			if s.Error == nil || s.Error.ErrorType != errType || s.Error.Reason != reason || !strings.Contains(s.Error.Message, msg) {
				t.Errorf("%s: %s/%s error %+v, want %s %s %q", n.Name, e.NodeName, s.ContainerName, s.Error, errType, reason, msg)
			}
		}
	}
}

func dynamicClient(t *testing.T, kubeconfig string) dynamic.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// One client plays many nodes in TestHundredNodesWritingAtOnceConverge; each real node
	// has its own client and its own client-side rate limit.
	cfg.QPS, cfg.Burst = 500, 500
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// createNotification creates one with kubectl, as a controller or an operator would.
func createNotification(t *testing.T, name, notifier, app string) {
	t.Helper()
	apply(t, fmt.Sprintf(`apiVersion: crishim.io/v1alpha1
kind: Notification
metadata:
  name: %s
spec:
  containerNotifierName: %s
  podSelector:
    matchLabels: {app: %s}
`, name, notifier, app))
}

func waitNotification(t *testing.T, ctx context.Context, dyn dynamic.Interface, name string, done func(*v1alpha1.Notification) bool) *v1alpha1.Notification {
	t.Helper()
	var n v1alpha1.Notification
	eventually(t, 2*time.Minute, func() error {
		u, err := dyn.Resource(v1alpha1.Resource).Namespace("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n = v1alpha1.Notification{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &n); err != nil {
			return err
		}
		if !done(&n) {
			return fmt.Errorf("notification %s not there yet: %+v", name, n.Status)
		}
		return nil
	})
	return &n
}

// secondNode is a crishim with its own node name in front of its own containerd, with pods
// made through CRI as a kubelet would make them.
type secondNode struct {
	name     string
	cd       *harness.Containerd
	p        *crishimproc.Process
	rs       runtimeapi.RuntimeServiceClient
	logDir   string
	kubeconf string
}

func startSecondNode(t *testing.T, ctx context.Context) *secondNode {
	t.Helper()
	cd, err := harness.Start(ctx, harness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cd.Stop() })
	name := "crishim-second-node"
	kc, err := testNode.ClientKubeconfig("second-node", "system:node:"+name, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	b := &secondNode{name: name, cd: cd, kubeconf: kc, logDir: t.TempDir()}
	b.restart(t)
	t.Cleanup(func() { _ = b.p.Stop() })
	conn, err := grpc.NewClient(b.p.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	b.rs = runtimeapi.NewRuntimeServiceClient(conn)
	return b
}

// restart (re)starts node B's crishim with extra flags.
func (b *secondNode) restart(t *testing.T, extra ...string) {
	t.Helper()
	if b.p != nil {
		if err := b.p.Stop(); err != nil {
			t.Fatalf("stop second crishim: %v", err)
		}
	}
	p, err := crishimproc.Start(crishimproc.Options{
		Binary:          filepath.Join(binDir, "crishim"),
		Socket:          filepath.Join(b.cd.Dir, "crishim.sock"),
		RuntimeEndpoint: b.cd.Endpoint,
		LogPath:         filepath.Join(b.cd.Dir, "crishim.log"),
		Args:            append([]string{"--kubeconfig", b.kubeconf, "--node-name", b.name, "--containerd-address", b.cd.ContainerdAddress}, extra...),
	})
	if err != nil {
		t.Fatal(err)
	}
	b.p = p
}

func (b *secondNode) runPod(t *testing.T, ctx context.Context, name string, labels map[string]string) (podID, ctrID string) {
	t.Helper()
	logDir := filepath.Join(b.logDir, name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	pod := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: fmt.Sprintf("uid-%s-%d", name, time.Now().UnixNano())},
		Labels:       labels,
		Annotations:  notifierAnnotations,
		LogDirectory: logDir,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	run, err := b.rs.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pod})
	if err != nil {
		t.Fatalf("RunPodSandbox on node B: %v", err)
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
		Image:    &runtimeapi.ImageSpec{Image: b.cd.BusyboxImage},
		Command:  []string{"sleep", "3600"},
		LogPath:  "main.log",
	}
	c, err := b.rs.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: run.GetPodSandboxId(), Config: cfg, SandboxConfig: pod})
	if err != nil {
		t.Fatalf("CreateContainer on node B: %v", err)
	}
	if _, err := b.rs.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.GetContainerId()}); err != nil {
		t.Fatalf("StartContainer on node B: %v", err)
	}
	return run.GetPodSandboxId(), c.GetContainerId()
}

func (b *secondNode) exec(t *testing.T, ctx context.Context, ctrID string, cmd ...string) string {
	t.Helper()
	resp, err := b.rs.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: ctrID, Cmd: cmd, Timeout: 10})
	if err != nil {
		t.Fatalf("ExecSync on node B: %v", err)
	}
	return string(resp.GetStdout())
}

// TestApiserverDownLeavesCRIAlone: with the apiserver gone, crishim's Notification watch
// reports itself down in its metric while CRI calls through crishim keep working; with the
// apiserver back the watch comes back by itself.
func TestApiserverDownLeavesCRIAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := testNode.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			_ = testNode.StartAPIServer(context.Background())
		}
	}()
	eventually(t, time.Minute, func() error {
		if v := metric(t, "crishim_notifications_watch_up"); v != 0 {
			return fmt.Errorf("crishim_notifications_watch_up %v with the apiserver stopped", v)
		}
		if v := metric(t, `crishim_notifications_apiserver_errors_total{op="watch"}`); v == 0 {
			return fmt.Errorf("no watch error counted while the apiserver is down")
		}
		return nil
	})
	_ = runningContainers(t, nil) // fails the test unless CRI answers through crishim
	if err := testNode.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	if err := testNode.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, func() error {
		if v := metric(t, "crishim_notifications_watch_up"); v != 1 {
			return fmt.Errorf("crishim_notifications_watch_up %v with the apiserver back", v)
		}
		return nil
	})
}
