package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/notification/v1alpha2"
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

// TestNotificationAcrossTwoNodes: the Notification API as it runs in a cluster, on the real
// node. A Notification selects a kubelet pod on the test node and a pod on a second "node" (a
// second crishim with its own --node-name and node credentials in front of a second
// containerd; its Pod and Node objects are created as its kubelet would); the aggregator,
// crishim-notification-controller, runs as a real pod of the test node (test/node installs
// packaging/kubernetes/ and its Deployment). It fans the Notification out to one
// NodeNotification per node, each node runs its pod and reports, and the aggregator sums up:
// exact counts, failures shown, nothing selected said so, restarts running nothing twice,
// a deleted Notification taking its NodeNotifications along.
func TestNotificationAcrossTwoNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	group := uniqueName("notif")
	dyn := dynamicClient(t, testNode.Kubeconfig)

	// Node A: the kubelet's pod.
	annotations := "  annotations:\n"
	for k, v := range notifierAnnotations {
		annotations += fmt.Sprintf("    %s: '%s'\n", k, v)
	}
	apply(t, strings.Replace(podManifest(group+"-a", annotations, "", "main", "exec sleep 3600"), "app: "+group+"-a", "app: "+group, 1))
	waitReady(t, group+"-a")

	// Node B: a second containerd and crishim, with the identity of a node; its pod is in the
	// apiserver, bound to it, as its kubelet would have it (the aggregator selects from there).
	b := startSecondNode(t, ctx)
	uid := b.registerPod(t, ctx, group+"-b", map[string]string{"app": group})
	_, ctrB := b.runPod(t, ctx, group+"-b", uid, map[string]string{"app": group})

	// One Notification per notifier, created at once; each completes.
	final := map[string]*v1alpha2.Notification{}
	for _, name := range []string{"quiesce", "fail", "stuck"} {
		createNotification(t, group+"-"+name, name, group)
	}
	// The user's wait: real kubectl, on the Notification's condition.
	kubectl(t, "wait", "--for=condition=Succeeded", "notification/"+group+"-quiesce", "--timeout=120s")
	for _, name := range []string{"quiesce", "fail", "stuck"} {
		final[name] = waitNotification(t, ctx, dyn, group+"-"+name, func(n *v1alpha2.Notification) bool {
			return isTrue(n, v1alpha2.ConditionComplete)
		})
	}

	t.Run("both nodes run their pods, counts exact", func(t *testing.T) {
		n := final["quiesce"]
		st := n.Status
		if st.Selected != 2 || st.Started != 2 || st.Succeeded != 2 || st.Failed != 0 || st.Nodes != 2 || len(st.Failures) != 0 {
			t.Errorf("status %+v, want 2 nodes, 2 selected, started and succeeded, none failed", st)
		}
		for _, c := range []string{v1alpha2.ConditionTriggered, v1alpha2.ConditionSucceeded, v1alpha2.ConditionComplete} {
			if !isTrue(n, c) {
				t.Errorf("%s %+v, want True", c, meta.FindStatusCondition(st.Conditions, c))
			}
		}
		// Per-pod results, by the label every NodeNotification of it carries.
		shares := nodeNotifications(t, ctx, dyn, n)
		byNode := map[string]string{}
		for _, s := range shares {
			if s.Status.Phase != v1alpha2.PhaseFinished || len(s.Status.Pods) != 1 || s.Status.Pods[0].State != v1alpha2.PodSucceeded {
				t.Errorf("NodeNotification %s of %s: %+v, want Finished with its one pod Succeeded", s.Name, s.Spec.NodeName, s.Status)
				continue
			}
			byNode[s.Spec.NodeName] = s.Status.Pods[0].Name
			if want := s.Spec.NodeName + "/"; !strings.HasPrefix(s.Status.Runner, want) {
				t.Errorf("NodeNotification %s run by %q, want its node's crishim (%s...)", s.Name, s.Status.Runner, want)
			}
		}
		if len(shares) != 2 || byNode[testNode.Name] != group+"-a" || byNode[b.name] != group+"-b" {
			t.Errorf("pods by node %v, want %s: %s-a and %s: %s-b", byNode, testNode.Name, group, b.name, group)
		}
		// What `kubectl get notifications` shows: the counts as columns.
		out := kubectl(t, "get", "notification", n.Name)
		if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 ||
			!strings.HasPrefix(lines[0], "NAME") || !containsEvery(lines[0], []string{"NOTIFIER", "SELECTED", "STARTED", "SUCCEEDED", "FAILED", "RESULT"}) ||
			!regexp.MustCompile(`^`+n.Name+`\s+quiesce\s+2\s+2\s+2\s+0\s+True\s`).MatchString(lines[1]) { // failed 0 shows as 0, not a blank
			t.Errorf("kubectl get notification:\n%s", out)
		}
	})
	t.Run("a failing notifier", func(t *testing.T) {
		checkFailed(t, final["fail"], "ActionFailed", "disk full")
		// One Warning Event by the aggregator when Succeeded turned False.
		eventually(t, 30*time.Second, func() error {
			out := kubectl(t, "get", "events", "--field-selector", "involvedObject.name="+group+"-fail", "-o", "jsonpath={.items[*].reason}")
			if !strings.Contains(out, v1alpha2.ReasonFailed) {
				return fmt.Errorf("no %s Event on the Notification: %q", v1alpha2.ReasonFailed, out)
			}
			return nil
		})
	})
	t.Run("a stuck notifier", func(t *testing.T) {
		checkFailed(t, final["stuck"], "ProbeFailed", "did not succeed in time")
	})
	t.Run("nothing selected", func(t *testing.T) {
		obj := group + "-none"
		createNotification(t, obj, "quiesce", group+"-nobody")
		n := waitNotification(t, ctx, dyn, obj, func(n *v1alpha2.Notification) bool {
			return meta.FindStatusCondition(n.Status.Conditions, v1alpha2.ConditionTriggered) != nil
		})
		if c := meta.FindStatusCondition(n.Status.Conditions, v1alpha2.ConditionTriggered); c.Status != metav1.ConditionFalse || c.Reason != v1alpha2.ReasonNoSelectedPods || !strings.Contains(c.Message, `"quiesce"`) {
			t.Errorf("Triggered %+v, want False %s naming the notifier", c, v1alpha2.ReasonNoSelectedPods)
		}
		if n.Status.Selected != 0 {
			t.Errorf("selected %d, want 0", n.Status.Selected)
		}
		if shares := nodeNotifications(t, ctx, dyn, n); len(shares) != 0 {
			t.Errorf("%d NodeNotifications, want none", len(shares))
		}
	})
	t.Run("restarts run nothing twice", func(t *testing.T) {
		if err := testNode.RestartCrishim(ctx, false); err != nil {
			t.Fatal(err)
		}
		b.restart(t)
		// The signal that both restarted crishims have looked at every NodeNotification of
		// theirs: a new Notification, created now, completed by both. Each queues the shares
		// its inbox lists when it first reads it, before any later one, and takes them in
		// order, so by the time it has run the new one it has taken up the old ones; and
		// those are Finished, which a node reads without running anything.
		obj := group + "-mark"
		createNotification(t, obj, "mark", group)
		waitNotification(t, ctx, dyn, obj, func(n *v1alpha2.Notification) bool {
			return isTrue(n, v1alpha2.ConditionComplete) && n.Status.Succeeded == 2
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
	t.Run("each node's inbox, owned by its Node", func(t *testing.T) {
		// Node B's inbox lists its share of a Notification (finished shares stay listed
		// until the next write); its Node owns it, so deleting the node deletes it.
		inboxes := dyn.Resource(v1alpha2.InboxResource)
		for _, node := range []string{testNode.Name, b.name} {
			u, err := inboxes.Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("inbox of %s: %v", node, err)
			}
			var in v1alpha2.NotificationInbox
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &in); err != nil {
				t.Fatal(err)
			}
			n, err := testNode.Clientset.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if o := in.OwnerReferences; len(o) != 1 || o[0].Kind != "Node" || o[0].UID != n.UID {
				t.Errorf("inbox of %s owned by %+v, want its Node %s", node, o, n.UID)
			}
			if len(in.Spec.Shares) == 0 {
				t.Errorf("inbox of %s lists no share", node)
			}
		}
	})
	t.Run("a deleted Notification takes its NodeNotifications", func(t *testing.T) {
		// The garbage collector of the node's kube-controller-manager deletes them by their
		// owner reference.
		n := final["quiesce"]
		if shares := nodeNotifications(t, ctx, dyn, n); len(shares) != 2 {
			t.Fatalf("%d NodeNotifications before the delete, want 2", len(shares))
		}
		kubectl(t, "delete", "notification", n.Name)
		eventually(t, time.Minute, func() error {
			if shares := nodeNotifications(t, ctx, dyn, n); len(shares) != 0 {
				return fmt.Errorf("%d NodeNotifications of the deleted Notification left", len(shares))
			}
			return nil
		})
	})
	t.Run("a deleted node takes its inbox", func(t *testing.T) {
		if err := testNode.Clientset.CoreV1().Nodes().Delete(ctx, b.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, func() error {
			_, err := dyn.Resource(v1alpha2.InboxResource).Get(ctx, b.name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("inbox of the deleted node %s: %v, want NotFound", b.name, err)
			}
			return nil
		})
	})
}

func isTrue(n *v1alpha2.Notification, typ string) bool {
	return meta.IsStatusConditionTrue(n.Status.Conditions, typ)
}

// checkFailed: both pods failed, the failures shown in the Notification's status, Succeeded
// False and Complete True.
func checkFailed(t *testing.T, n *v1alpha2.Notification, reason, msg string) {
	t.Helper()
	st := n.Status
	if st.Selected != 2 || st.Started != 2 || st.Succeeded != 0 || st.Failed != 2 || st.FailuresNotShown != 0 {
		t.Errorf("%s: status %+v, want 2 selected, started and failed", n.Name, st)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha2.ConditionSucceeded); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha2.ReasonFailed {
		t.Errorf("%s: Succeeded %+v, want False %s", n.Name, c, v1alpha2.ReasonFailed)
	}
	if !isTrue(n, v1alpha2.ConditionComplete) {
		t.Errorf("%s: not Complete", n.Name)
	}
	nodes := map[string]bool{}
	for _, f := range st.Failures {
		nodes[f.NodeName] = true
		if f.ContainerName != "main" || f.Reason != reason || !strings.Contains(f.Message, msg) || f.PodUID == "" {
			t.Errorf("%s: failure %+v, want container main, %s, %q", n.Name, f, reason, msg)
		}
	}
	if len(st.Failures) != 2 || len(nodes) != 2 {
		t.Errorf("%s: failures %+v, want one on each node", n.Name, st.Failures)
	}
}

// nodeNotifications lists a Notification's per-node objects by its UID label, as the docs
// tell a user to.
func nodeNotifications(t *testing.T, ctx context.Context, dyn dynamic.Interface, n *v1alpha2.Notification) []v1alpha2.NodeNotification {
	t.Helper()
	l, err := dyn.Resource(v1alpha2.NodeResource).Namespace(n.Namespace).List(ctx, metav1.ListOptions{LabelSelector: v1alpha2.LabelNotificationUID + "=" + string(n.UID)})
	if err != nil {
		t.Fatalf("list NodeNotifications: %v", err)
	}
	out := make([]v1alpha2.NodeNotification, len(l.Items))
	for i := range l.Items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[i].Object, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func dynamicClient(t *testing.T, kubeconfig string) dynamic.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// createNotification creates one with kubectl, as a controller or an operator would.
func createNotification(t *testing.T, name, notifier, app string) {
	t.Helper()
	apply(t, fmt.Sprintf(`apiVersion: crishim.io/v1alpha2
kind: Notification
metadata:
  name: %s
spec:
  containerNotifierName: %s
  podSelector:
    matchLabels: {app: %s}
`, name, notifier, app))
}

func waitNotification(t *testing.T, ctx context.Context, dyn dynamic.Interface, name string, done func(*v1alpha2.Notification) bool) *v1alpha2.Notification {
	t.Helper()
	var n v1alpha2.Notification
	eventually(t, 2*time.Minute, func() error {
		u, err := dyn.Resource(v1alpha2.Resource).Namespace("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n = v1alpha2.Notification{}
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

// registerPod creates node B's Node object and its pod name in the apiserver, bound to node
// B, as a kubelet and a scheduler would, and returns the pod's UID. No kubelet heartbeats for
// node B, so the node lifecycle controller will taint it unreachable: the pod tolerates that
// (it would be evicted after 5 minutes otherwise).
func (b *secondNode) registerPod(t *testing.T, ctx context.Context, name string, labels map[string]string) string {
	t.Helper()
	nodes := testNode.Clientset.CoreV1().Nodes()
	if _, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: b.name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create node B's Node: %v", err)
	}
	t.Cleanup(func() { _ = nodes.Delete(context.Background(), b.name, metav1.DeleteOptions{}) })
	pods := testNode.Clientset.CoreV1().Pods("default")
	p, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: notifierAnnotations},
		Spec: corev1.PodSpec{NodeName: b.name, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "main", Image: b.cd.BusyboxImage, Command: []string{"sleep", "3600"}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node B's pod: %v", err)
	}
	// No kubelet confirms its end: deleted at once.
	t.Cleanup(func() {
		_ = pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	return string(p.UID)
}

// runPod runs pod name (uid) on node B through its crishim, as its kubelet would.
func (b *secondNode) runPod(t *testing.T, ctx context.Context, name, uid string, labels map[string]string) (podID, ctrID string) {
	t.Helper()
	logDir := filepath.Join(b.logDir, name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	pod := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: uid},
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

// TestApiserverDownLeavesCRIAlone: with the apiserver gone, crishim's NodeNotification watch
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
