package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/crishim/crishim/notification"
	"github.com/crishim/crishim/notification/v1alpha1"
)

// nodeWritesPolicy is the ValidatingAdmissionPolicy of packaging/kubernetes/rbac.yaml.
const nodeWritesPolicy = "crishim-notifications-node-writes"

// TestNodesCannotForgeOtherNodesResults: with what packaging/kubernetes ships installed (the
// RBAC that lets every node write Notification statuses, and the admission policy that
// narrows it), two node identities with client certificates of the node's CA
// (system:node:<name> in system:nodes, as kubelets authenticate) each write their own entry,
// and neither can change, add, claim or remove the other's, make the conditions lie, or
// delete a Notification still in progress; a completed one they may delete (garbage
// collection).
func TestNodesCannotForgeOtherNodesResults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	suffix := fmt.Sprint(os.Getpid() % 10000)
	nodeA, nodeB := "crishim-policy-a-"+suffix, "crishim-policy-b-"+suffix
	a, b := nodeClient(t, nodeA), nodeClient(t, nodeB)
	admin := dynamicClient(t, testNode.Kubeconfig)
	waitPolicyEnforced(t, ctx, admin, b, nodeB)
	checkPolicyTypes(t, ctx, admin)

	name := uniqueName("forge")
	createNotification(t, name, "quiesce", name+"-nobody-selected")
	started := metav1.NewTime(time.Now().Truncate(time.Second))
	entry := func(node, pod string, succeed bool) v1alpha1.PodNotificationStatus {
		return v1alpha1.PodNotificationStatus{PodName: pod, PodUID: "uid-" + pod, NodeName: node,
			ContainerNotificationStatuses: []v1alpha1.ContainerNotificationStatus{{ContainerName: "main", Timestamp: &started, Succeed: succeed}}}
	}
	writeAs := func(dyn dynamic.Interface, node string, entries ...v1alpha1.PodNotificationStatus) error {
		n, err := getNotification(ctx, admin, name)
		if err != nil {
			t.Fatal(err)
		}
		mine := map[string]v1alpha1.PodNotificationStatus{}
		for _, e := range entries {
			mine[e.PodUID] = e
		}
		u, err := notification.ApplyObject(n, mine, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		_, err = dyn.Resource(v1alpha1.Resource).Namespace("default").ApplyStatus(ctx, name, u, metav1.ApplyOptions{FieldManager: "crishim/" + node, Force: true})
		return err
	}
	aStarted := entry(nodeA, "pod-a", false)
	if err := writeAs(a, nodeA, aStarted); err != nil {
		t.Fatalf("node A writing its own entry: %v", err)
	}

	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), nodeWritesPolicy) {
			t.Errorf("%s: %v, want refused by %s", what, err, nodeWritesPolicy)
		}
	}
	refused("node B marking node A's entry succeeded", writeAs(b, nodeB, entry(nodeA, "pod-a", true)))
	refused("node B claiming node A's pod as its own", writeAs(b, nodeB, entry(nodeB, "pod-a", true)))
	refused("node B adding an entry in node A's name", writeAs(b, nodeB, entry(nodeA, "pod-a2", true)))
	_, err := b.Resource(v1alpha1.Resource).Namespace("default").Patch(ctx, name, types.MergePatchType,
		[]byte(`{"status":{"podNotificationStatuses":[]}}`), metav1.PatchOptions{}, "status")
	refused("node B removing node A's entry", err)
	lie := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": v1alpha1.ConditionSucceeded, "status": "True", "reason": v1alpha1.ReasonAllSucceeded, "message": "forged", "lastTransitionTime": started.UTC().Format(time.RFC3339)},
	}}}}
	lie.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
	lie.SetKind(v1alpha1.Kind)
	lie.SetName(name)
	_, err = b.Resource(v1alpha1.Resource).Namespace("default").ApplyStatus(ctx, name, lie, metav1.ApplyOptions{FieldManager: "crishim/" + nodeB, Force: true})
	refused("node B setting Succeeded True while node A's run is pending", err)
	refused("node B deleting the Notification in progress", b.Resource(v1alpha1.Resource).Namespace("default").Delete(ctx, name, metav1.DeleteOptions{}))

	if err := writeAs(b, nodeB, entry(nodeB, "pod-b", true)); err != nil {
		t.Fatalf("node B writing its own entry: %v", err)
	}
	n, err := getNotification(ctx, admin, name)
	if err != nil {
		t.Fatal(err)
	}
	byPod := map[string]v1alpha1.PodNotificationStatus{}
	for _, e := range n.Status.PodNotificationStatuses {
		byPod[e.PodName] = e
	}
	if got := byPod["pod-a"]; got.NodeName != nodeA || len(got.ContainerNotificationStatuses) != 1 || got.ContainerNotificationStatuses[0].Succeed {
		t.Errorf("node A's entry is now %+v, want its own started entry", got)
	}
	if got := byPod["pod-b"]; got.NodeName != nodeB || len(n.Status.PodNotificationStatuses) != 2 {
		t.Errorf("entries %+v, want node A's and node B's", n.Status.PodNotificationStatuses)
	}

	// Completed, the Notification may go: garbage collection is a node's job.
	if err := writeAs(a, nodeA, entry(nodeA, "pod-a", true)); err != nil {
		t.Fatalf("node A writing its result: %v", err)
	}
	if err := writeAs(b, nodeB, entry(nodeB, "pod-b", true)); err != nil {
		t.Fatalf("node B settling the conditions: %v", err)
	}
	if err := b.Resource(v1alpha1.Resource).Namespace("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("node B deleting the completed Notification: %v", err)
	}
}

// nodeClient is a client of the test node's apiserver with the identity of node name.
func nodeClient(t *testing.T, name string) dynamic.Interface {
	t.Helper()
	kc, err := testNode.ClientKubeconfig(name, "system:node:"+name, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	return dynamicClient(t, kc)
}

// checkPolicyTypes fails the test if the apiserver's type check of the policy against the
// CRD's schema found anything to warn about (a misspelt field, a comparison of wrong types):
// such an expression fails, or is always true, at run time.
func checkPolicyTypes(t *testing.T, ctx context.Context, admin dynamic.Interface) {
	t.Helper()
	vap := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
	eventually(t, 30*time.Second, func() error {
		u, err := admin.Resource(vap).Get(ctx, nodeWritesPolicy, metav1.GetOptions{})
		if err != nil {
			return err
		}
		observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		if observed != u.GetGeneration() {
			return fmt.Errorf("policy generation %d not type-checked yet (%d)", u.GetGeneration(), observed)
		}
		warnings, _, _ := unstructured.NestedSlice(u.Object, "status", "typeChecking", "expressionWarnings")
		for _, w := range warnings {
			t.Errorf("type check of %s: %v", nodeWritesPolicy, w)
		}
		return nil
	})
}

// waitPolicyEnforced returns once the apiserver enforces the node-writes policy, seen on a
// Notification of its own: node writes an entry in another node's name until it is refused
// (an admission policy takes effect shortly after it is created). Without the policy the
// test fails here.
func waitPolicyEnforced(t *testing.T, ctx context.Context, admin, dyn dynamic.Interface, node string) {
	t.Helper()
	name := uniqueName("policy-probe")
	createNotification(t, name, "quiesce", name+"-nobody-selected")
	t.Cleanup(func() {
		_ = admin.Resource(v1alpha1.Resource).Namespace("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	eventually(t, 30*time.Second, func() error {
		n, err := getNotification(ctx, admin, name)
		if err != nil {
			return err
		}
		other := v1alpha1.PodNotificationStatus{PodName: "p", PodUID: "uid-p", NodeName: "another-node"}
		u, err := notification.ApplyObject(n, map[string]v1alpha1.PodNotificationStatus{other.PodUID: other}, time.Now())
		if err != nil {
			return err
		}
		_, err = dyn.Resource(v1alpha1.Resource).Namespace("default").ApplyStatus(ctx, name, u, metav1.ApplyOptions{FieldManager: "crishim/" + node, Force: true})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), nodeWritesPolicy) {
			return nil
		}
		return errors.Join(fmt.Errorf("node %s wrote another node's entry: not refused by %s", node, nodeWritesPolicy), err)
	})
}

// TestNodePolicyCopesWithAThousandEntries: the policy compares the other nodes' entries
// before and after a node's write, which costs CEL evaluation in proportion to their number
// squared; with 1000 other entries (a Notification over a large deployment) it stays within
// the apiserver's CEL cost budget and a node's own write is accepted, and a forged one refused.
func TestNodePolicyCopesWithAThousandEntries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node := "crishim-policy-c-" + fmt.Sprint(os.Getpid()%10000)
	dyn, admin := nodeClient(t, node), dynamicClient(t, testNode.Kubeconfig)
	waitPolicyEnforced(t, ctx, admin, dyn, node)
	name := uniqueName("thousand")
	createNotification(t, name, "quiesce", name+"-nobody-selected")
	started := metav1.NewTime(time.Now().Truncate(time.Second))
	others := map[string]v1alpha1.PodNotificationStatus{}
	for i := range 1000 {
		e := v1alpha1.PodNotificationStatus{PodName: fmt.Sprintf("pod-%04d", i), PodUID: fmt.Sprintf("uid-%04d", i), NodeName: fmt.Sprintf("node-%04d", i%500),
			ContainerNotificationStatuses: []v1alpha1.ContainerNotificationStatus{{ContainerName: "main", Timestamp: &started, Succeed: true}}}
		others[e.PodUID] = e
	}
	if err := applyAsNode(ctx, admin, "seed", nil, func() (*v1alpha1.Notification, error) { return getNotification(ctx, admin, name) }, others); err != nil {
		t.Fatalf("seed 1000 entries: %v", err)
	}
	n, err := getNotification(ctx, admin, name)
	if err != nil {
		t.Fatal(err)
	}
	write := func(e v1alpha1.PodNotificationStatus) (time.Duration, error) {
		u, err := notification.ApplyObject(n, map[string]v1alpha1.PodNotificationStatus{e.PodUID: e}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = dyn.Resource(v1alpha1.Resource).Namespace("default").ApplyStatus(ctx, name, u, metav1.ApplyOptions{FieldManager: "crishim/" + node, Force: true})
		return time.Since(start), err
	}
	own := v1alpha1.PodNotificationStatus{PodName: "mine", PodUID: "uid-mine", NodeName: node,
		ContainerNotificationStatuses: []v1alpha1.ContainerNotificationStatus{{ContainerName: "main", Timestamp: &started, Succeed: true}}}
	took, err := write(own)
	if err != nil {
		t.Fatalf("node's own write beside 1000 entries: %v", err)
	}
	t.Logf("a node's write beside 1000 other entries took %s", took)
	forged := others["uid-0001"]
	forged.ContainerNotificationStatuses = []v1alpha1.ContainerNotificationStatus{{ContainerName: "main", Timestamp: &started}}
	if _, err := write(forged); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), nodeWritesPolicy) {
		t.Errorf("forged write beside 1000 entries: %v, want refused by %s", err, nodeWritesPolicy)
	}
}
