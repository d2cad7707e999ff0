package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/crishim/crishim/notification/v1alpha2"
	"github.com/crishim/crishim/test/node"
)

// The v1alpha2 design on the bed's real etcd and kube-apiserver with the shipped v1alpha2
// manifests: small runs of the scale harness (its real aggregator and nodes) for the cases
// of issue 32, and the admission policy with two node identities.

var cp *node.Node

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() || os.Geteuid() != 0 {
		fmt.Println("scale: skipped (-short, or not root: the bed's control plane needs root)")
		return 0
	}
	// Its own variable, not test/kube's CRISHIM_KUBE_NODE: go test runs the two packages at
	// once, and they must not share a node directory.
	index := 11
	if v := os.Getenv("CRISHIM_SCALE_NODE"); v != "" {
		i, err := strconv.Atoi(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, "CRISHIM_SCALE_NODE:", err)
			return 2
		}
		index = i
	}
	dir, err := node.ManifestsDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cp, err = node.StartControlPlane(ctx, node.Options{Index: index}, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale: start control plane:", err)
		_ = node.Clean(index)
		return 1
	}
	defer cp.Stop()
	return m.Run()
}

func clients(t *testing.T) (kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	rc, err := restConfig(cp.Kubeconfig, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS, rc.Burst = 500, 1000
	kube, dyn := kubernetes.NewForConfigOrDie(rc), dynamic.NewForConfigOrDie(rc)
	if err := waitCRDs(context.Background(), dyn); err != nil {
		t.Fatal(err)
	}
	if err := ensureDefaultServiceAccount(context.Background(), kube); err != nil {
		t.Fatal(err)
	}
	return kube, dyn
}

func check(t *testing.T, r row, wantFailed int) {
	t.Helper()
	t.Logf("%d nodes: %.1f s, largest object %d B, %d writes, %d watch events, %d 504s, %d refused: %s",
		r.nodes, r.seconds, r.maxObject, r.writes, r.events, r.timeouts, r.refused, r.result)
	if strings.Contains(r.result, "WRONG") {
		t.Errorf("counts: %s", r.result)
	}
	if !strings.Contains(r.result, fmt.Sprintf("failed %d ", wantFailed)) {
		t.Errorf("want %d failed: %s", wantFailed, r.result)
	}
	if r.maxObject > 100*1024 {
		t.Errorf("largest object %d B > 100 KiB", r.maxObject)
	}
	if r.refused > 0 {
		t.Errorf("%d writes refused", r.refused)
	}
}

// TestLateNodesAndTimedOutWrites: 3 of 10 nodes start 5 s after the Notification, and every
// third node status write is stored but answered 504: every pod runs once, the counts are
// exact, and no 504 became a failure.
func TestLateNodesAndTimedOutWrites(t *testing.T) {
	kube, dyn := clients(t)
	r, err := runOnce(context.Background(), config{pods: 1, late: 3, lateBy: 5 * time.Second, inject: 0.34, timeout: 5 * time.Minute}, cp, kube, dyn, 10, 100)
	if err != nil {
		t.Fatal(err)
	}
	check(t, r, 0)
	if r.timeouts == 0 {
		t.Error("no 504 injected")
	}
}

// TestFailingNotifierInAThousandPods: 1,000 pods (25 nodes × 40) whose notifier fails: the
// Notification shows 1,000 failed, ten of them, 990 counted, every object under 100 KiB.
func TestFailingNotifierInAThousandPods(t *testing.T) {
	kube, dyn := clients(t)
	r, err := runOnce(context.Background(), config{pods: 40, fail: 1000, timeout: 5 * time.Minute}, cp, kube, dyn, 25, 101)
	if err != nil {
		t.Fatal(err)
	}
	check(t, r, 1000)
	if !strings.Contains(r.result, "(shown 10, +990)") {
		t.Errorf("failures shown: %s", r.result)
	}
}

// TestNodesCannotForgeResults: with the shipped RBAC and admission policy, a node writes its
// own NodeNotification's status, and cannot write another node's, claim a run in another
// node's name, create or delete shares, or touch a Notification.
func TestNodesCannotForgeResults(t *testing.T) {
	ctx := context.Background()
	_, admin := clients(t)
	const nodeA, nodeB = "forge-a", "forge-b"
	a, b := nodeDynamic(t, nodeA), nodeDynamic(t, nodeB)
	n := createNotification(t, admin, "forge")
	shareA, shareB := createShare(t, admin, n, nodeA), createShare(t, admin, n, nodeB)
	status := func(nn *unstructured.Unstructured, runner string) *unstructured.Unstructured {
		out := nn.DeepCopy()
		_ = unstructured.SetNestedMap(out.Object, map[string]any{"phase": v1alpha2.PhaseRunning, "runner": runner}, "status")
		return out
	}
	refused := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want forbidden", what, err)
		}
	}
	// The policy takes effect shortly after it is created: wait for the first refusal.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := b.Resource(v1alpha2.NodeResource).Namespace("default").UpdateStatus(ctx, status(shareA, nodeB+"/x"), metav1.UpdateOptions{})
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "crishim-nodenotifications-node-writes") {
			break
		}
		if err == nil || time.Now().After(deadline) {
			t.Fatalf("node B writing node A's share: %v, want refused by the policy", err)
		}
		time.Sleep(500 * time.Millisecond) // the policy's informer catching up
	}
	if _, err := a.Resource(v1alpha2.NodeResource).Namespace("default").UpdateStatus(ctx, status(shareA, nodeA+"/x"), metav1.UpdateOptions{}); err != nil {
		t.Errorf("node A writing its own share: %v", err)
	}
	_, err := b.Resource(v1alpha2.NodeResource).Namespace("default").UpdateStatus(ctx, status(shareB, nodeA+"/x"), metav1.UpdateOptions{})
	refused("node B recording a run in node A's name", err)
	spec := shareB.DeepCopy()
	_ = unstructured.SetNestedField(spec.Object, nodeB+"-other", "spec", "containerNotifierName")
	_, err = b.Resource(v1alpha2.NodeResource).Namespace("default").Update(ctx, spec, metav1.UpdateOptions{})
	refused("node B changing its share's spec", err)
	extra := shareB.DeepCopy()
	extra.SetName("forged-share")
	extra.SetResourceVersion("")
	_, err = b.Resource(v1alpha2.NodeResource).Namespace("default").Create(ctx, extra, metav1.CreateOptions{})
	refused("node B creating a share", err)
	refused("node B deleting its share", b.Resource(v1alpha2.NodeResource).Namespace("default").Delete(ctx, shareB.GetName(), metav1.DeleteOptions{}))
	parent, err := admin.Resource(v1alpha2.Resource).Namespace("default").Get(ctx, n.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(parent.Object, int64(1), "status", "succeeded")
	_, err = b.Resource(v1alpha2.Resource).Namespace("default").UpdateStatus(ctx, parent, metav1.UpdateOptions{})
	refused("node B writing the Notification's counts", err)
	// Inboxes: a node reads its own by name and writes none, its own included.
	inbox := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha2.SchemeGroupVersion.String(), "kind": v1alpha2.InboxKind,
		"metadata": map[string]any{"name": nodeB}, "spec": map[string]any{"shares": []any{map[string]any{"namespace": "default", "name": shareA.GetName(), "uid": string(shareA.GetUID())}}}}}
	_, err = b.Resource(v1alpha2.InboxResource).Create(ctx, inbox, metav1.CreateOptions{})
	refused("node B writing its inbox", err)
	if _, err := admin.Resource(v1alpha2.InboxResource).Create(ctx, inbox, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Resource(v1alpha2.InboxResource).Get(ctx, nodeB, metav1.GetOptions{}); err != nil {
		t.Errorf("node B reading its inbox: %v", err)
	}
	_, err = b.Resource(v1alpha2.InboxResource).Update(ctx, inbox, metav1.UpdateOptions{})
	refused("node B updating its inbox", err)
	refused("node B deleting its inbox", b.Resource(v1alpha2.InboxResource).Delete(ctx, nodeB, metav1.DeleteOptions{}))
	_ = admin.Resource(v1alpha2.InboxResource).Delete(ctx, nodeB, metav1.DeleteOptions{})
}

func nodeDynamic(t *testing.T, name string) dynamic.Interface {
	t.Helper()
	kc, err := cp.ClientKubeconfig(name, "system:node:"+name, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := restConfig(kc, nil)
	if err != nil {
		t.Fatal(err)
	}
	return dynamic.NewForConfigOrDie(rc)
}

func createNotification(t *testing.T, dyn dynamic.Interface, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha2.SchemeGroupVersion.String(), "kind": v1alpha2.Kind,
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec":     map[string]any{"containerNotifierName": "quiesce", "podSelector": map[string]any{"matchLabels": map[string]any{"app": name}}},
	}}
	got, err := dyn.Resource(v1alpha2.Resource).Namespace("default").Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func createShare(t *testing.T, dyn dynamic.Interface, n *unstructured.Unstructured, nodeName string) *unstructured.Unstructured {
	t.Helper()
	nn := &v1alpha2.NodeNotification{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.SchemeGroupVersion.String(), Kind: v1alpha2.NodeKind},
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha2.NodeNotificationName(n.GetName(), string(n.GetUID()), nodeName, 0), Namespace: "default"},
		Spec: v1alpha2.NodeNotificationSpec{NodeName: nodeName, NotificationName: n.GetName(), NotificationUID: string(n.GetUID()),
			ContainerNotifierName: "quiesce", Pods: []v1alpha2.PodRef{{Name: "p-" + nodeName, UID: "uid-" + nodeName}}},
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(nn)
	if err != nil {
		t.Fatal(err)
	}
	got, err := dyn.Resource(v1alpha2.NodeResource).Namespace("default").Create(context.Background(), &unstructured.Unstructured{Object: m}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}
