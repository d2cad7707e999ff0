package aggregator

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/crishim/crishim/notification/v1alpha2"
)

// The tests run the aggregator against client-go's fake clientset (pods) and fake dynamic
// client (Notifications, NodeNotifications), with the informers' caches filled by hand,
// calling reconcile as the work queue would.

var created = time.Now().Add(-time.Minute).Truncate(time.Second)

type fixture struct {
	t   *testing.T
	c   *Controller
	dyn *dynamicfake.FakeDynamicClient
	now time.Time
}

func newFixture(t *testing.T, n *v1alpha2.Notification, pods ...*corev1.Pod) *fixture {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha2.Resource: "NotificationList", v1alpha2.NodeResource: "NodeNotificationList", v1alpha2.InboxResource: "NotificationInboxList"}, mustUnstructured(t, n))
	f := &fixture{t: t, dyn: dyn, now: time.Now()}
	// The apiserver stamps creation; the fake does not.
	dyn.PrependReactor("create", "nodenotifications", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(metav1.Object).SetCreationTimestamp(metav1.NewTime(f.now))
		return false, nil, nil
	})
	f.leader()
	for _, p := range pods {
		if err := f.c.pods.GetIndexer().Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// leader is a new aggregator process taking over: empty caches filled from the store.
func (f *fixture) leader() {
	f.c = New(Options{Kube: kubefake.NewClientset(), Dynamic: f.dyn, Now: func() time.Time { return f.now }, AnswerTimeout: time.Minute})
	f.sync()
}

// sync makes the caches what the store holds (the watch caught up).
func (f *fixture) sync() {
	f.t.Helper()
	for _, r := range []struct {
		gvr schema.GroupVersionResource
		idx interface{ Replace([]any, string) error }
		ns  string
	}{{v1alpha2.Resource, f.c.notifs.GetIndexer(), "default"}, {v1alpha2.NodeResource, f.c.shares.GetIndexer(), "default"}, {v1alpha2.InboxResource, f.c.inboxes.GetIndexer(), ""}} {
		l, err := f.dyn.Resource(r.gvr).Namespace(r.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
		var items []any
		for i := range l.Items {
			items = append(items, &l.Items[i])
		}
		if err := r.idx.Replace(items, ""); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) reconcile() time.Duration {
	f.t.Helper()
	f.sync()
	again, err := f.c.reconcile(context.Background(), "default/q")
	if err != nil {
		f.t.Fatal(err)
	}
	return again
}

func (f *fixture) notification() *v1alpha2.Notification {
	f.t.Helper()
	u, err := f.dyn.Resource(v1alpha2.Resource).Namespace("default").Get(context.Background(), "q", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	n, err := decodeNotification(u)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *fixture) shares() []*v1alpha2.NodeNotification {
	f.t.Helper()
	l, err := f.dyn.Resource(v1alpha2.NodeResource).Namespace("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []*v1alpha2.NodeNotification
	for i := range l.Items {
		nn, err := decodeShare(&l.Items[i])
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, nn)
	}
	return out
}

// finish writes a node's results into its share, as the node would.
func (f *fixture) finish(nn *v1alpha2.NodeNotification, state, reason string) {
	f.t.Helper()
	now := metav1.NewTime(f.now)
	nn.Status = v1alpha2.NodeNotificationStatus{Phase: v1alpha2.PhaseFinished, Runner: nn.Spec.NodeName + "/x", StartedAt: &now, FinishedAt: &now}
	for _, p := range nn.Spec.Pods {
		r := v1alpha2.PodResult{Name: p.Name, UID: p.UID, State: state, Containers: 1}
		if state == v1alpha2.PodSucceeded {
			r.Succeeded = 1
		} else {
			r.FailedContainers = []v1alpha2.ContainerFailure{{Name: "main", ErrorType: v1alpha2.ErrorTypeError, Reason: reason, Message: "disk full"}}
		}
		nn.Status.Pods = append(nn.Status.Pods, r)
	}
	if _, err := f.dyn.Resource(v1alpha2.NodeResource).Namespace("default").UpdateStatus(context.Background(), mustUnstructured(f.t, nn), metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func notification() *v1alpha2.Notification {
	return &v1alpha2.Notification{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.SchemeGroupVersion.String(), Kind: v1alpha2.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "default", UID: "q-uid", CreationTimestamp: metav1.NewTime(created)},
		Spec:       v1alpha2.NotificationSpec{ContainerNotifierName: "quiesce", PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}
}

func pod(name, node string, declares bool, at time.Time) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Labels: map[string]string{"app": "db"},
		CreationTimestamp: metav1.NewTime(at)}, Spec: corev1.PodSpec{NodeName: node}}
	if declares {
		p.Annotations = map[string]string{"notifier.crishim.io/main.quiesce": `{"exec":["true"]}`}
	}
	return p
}

func condition(n *v1alpha2.Notification, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(n.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// TestFanOutSumAndSucceed: pods on two nodes are fanned out to one share per node (a pod
// without the notifier counted aside, a pod created later and an unbound one not selected);
// results summed; Succeeded and Complete True.
func TestFanOutSumAndSucceed(t *testing.T) {
	old := created.Add(-time.Hour)
	f := newFixture(t, notification(), pod("a1", "node-a", true, old), pod("a2", "node-a", true, old), pod("b1", "node-b", true, old),
		pod("plain", "node-b", false, old), pod("late", "node-b", true, created.Add(time.Minute)), pod("pending", "", true, old))
	f.reconcile()
	n := f.notification()
	if n.Status.Selected != 3 || n.Status.Nodes != 2 || n.Status.WithoutNotifier != 1 || condition(n, v1alpha2.ConditionTriggered).Status != metav1.ConditionTrue {
		t.Fatalf("after fan-out: %+v", n.Status)
	}
	shares := f.shares()
	if len(shares) != 2 {
		t.Fatalf("%d shares, want 2", len(shares))
	}
	for _, s := range shares {
		if s.OwnerReferences[0].UID != n.UID || s.Labels[v1alpha2.LabelNotificationUID] != string(n.UID) {
			t.Errorf("share %s: owner %v labels %v", s.Name, s.OwnerReferences, s.Labels)
		}
		f.finish(s, v1alpha2.PodSucceeded, "")
	}
	f.now = f.now.Add(2 * time.Second)
	f.reconcile()
	n = f.notification()
	if n.Status.Started != 3 || n.Status.Succeeded != 3 || n.Status.Failed != 0 ||
		condition(n, v1alpha2.ConditionSucceeded).Status != metav1.ConditionTrue || condition(n, v1alpha2.ConditionComplete).Status != metav1.ConditionTrue {
		t.Errorf("after results: %+v", n.Status)
	}
}

// TestNothingSelected: no pod declares the notifier: Triggered False NoSelectedPods,
// Succeeded False, Complete True, no share.
func TestNothingSelected(t *testing.T) {
	f := newFixture(t, notification(), pod("plain", "node-a", false, created.Add(-time.Hour)))
	f.reconcile()
	n := f.notification()
	if c := condition(n, v1alpha2.ConditionTriggered); c.Status != metav1.ConditionFalse || c.Reason != v1alpha2.ReasonNoSelectedPods {
		t.Errorf("Triggered %+v", c)
	}
	if c := condition(n, v1alpha2.ConditionSucceeded); c.Status != metav1.ConditionFalse || !complete(n) || len(f.shares()) != 0 || n.Status.WithoutNotifier != 1 {
		t.Errorf("status %+v, %d shares", n.Status, len(f.shares()))
	}
}

// TestThousandFailuresAreBounded: a failing notifier in 1,000 pods on 25 nodes: Failed 1000,
// the first ten shown (by the stated order), 990 counted, and the Notification stays small.
func TestThousandFailuresAreBounded(t *testing.T) {
	var pods []*corev1.Pod
	for i := range 1000 {
		pods = append(pods, pod(fmt.Sprintf("pod-%04d", i), fmt.Sprintf("node-%02d", i%25), true, created.Add(-time.Hour)))
	}
	f := newFixture(t, notification(), pods...)
	// 25 shares, made FanOutWindow at a time as the nodes finish theirs.
	for i := 0; !decided(f.notification()); i++ {
		if i == 25 {
			t.Fatal("fan-out not done after 25 rounds")
		}
		f.reconcile()
		for _, s := range f.shares() {
			if s.Status.Phase == "" {
				f.finish(s, v1alpha2.PodFailed, "ActionFailed")
			}
		}
	}
	f.now = f.now.Add(2 * time.Second)
	f.reconcile()
	n := f.notification()
	if n.Status.Selected != 1000 || n.Status.Failed != 1000 || len(n.Status.Failures) != v1alpha2.MaxFailuresShown || n.Status.FailuresNotShown != 990 {
		t.Fatalf("status counts %d/%d, %d shown, %d not", n.Status.Selected, n.Status.Failed, len(n.Status.Failures), n.Status.FailuresNotShown)
	}
	if f := n.Status.Failures[0]; f.NodeName != "node-00" || f.Reason != "ActionFailed" {
		t.Errorf("first failure %+v, want node-00's (same time: by node, then pod)", f)
	}
	if c := condition(n, v1alpha2.ConditionSucceeded); c.Status != metav1.ConditionFalse || c.Reason != v1alpha2.ReasonFailed {
		t.Errorf("Succeeded %+v", c)
	}
	b, _ := json.Marshal(n)
	if len(b) > 16*1024 {
		t.Errorf("Notification with 1000 failures is %d bytes", len(b))
	}
}

// TestSucceededNeverGoesBack: once True, no later view (a lagging cache, fewer results)
// changes it; nor does a failure turn a decided False True.
func TestSucceededNeverGoesBack(t *testing.T) {
	n := notification()
	nn := &v1alpha2.NodeNotification{Spec: v1alpha2.NodeNotificationSpec{NodeName: "a", Pods: []v1alpha2.PodRef{{Name: "p", UID: "u"}}},
		Status: v1alpha2.NodeNotificationStatus{Phase: v1alpha2.PhaseFinished, Pods: []v1alpha2.PodResult{{Name: "p", UID: "u", State: v1alpha2.PodSucceeded, Containers: 1, Succeeded: 1}}}}
	n.Status = summarize(n, []*v1alpha2.NodeNotification{nn}, time.Now())
	if condition(n, v1alpha2.ConditionSucceeded).Status != metav1.ConditionTrue {
		t.Fatalf("%+v", n.Status)
	}
	stale := nn.DeepCopy()
	stale.Status = v1alpha2.NodeNotificationStatus{}
	for _, view := range []*v1alpha2.NodeNotification{stale} {
		st := summarize(n, []*v1alpha2.NodeNotification{view}, time.Now())
		if c := meta.FindStatusCondition(st.Conditions, v1alpha2.ConditionSucceeded); c.Status != metav1.ConditionTrue {
			t.Errorf("Succeeded went back to %s", c.Status)
		}
		if c := meta.FindStatusCondition(st.Conditions, v1alpha2.ConditionComplete); c.Status != metav1.ConditionTrue {
			t.Errorf("Complete went back to %s", c.Status)
		}
	}
}

// TestSilentNodeExpires: a node that never starts its share: after AnswerTimeout the share
// is Expired, its pods failed NodeDidNotAnswer, the Notification complete with exact counts.
func TestSilentNodeExpires(t *testing.T) {
	old := created.Add(-time.Hour)
	f := newFixture(t, notification(), pod("a1", "node-a", true, old), pod("b1", "node-silent", true, old))
	f.reconcile()
	for _, s := range f.shares() {
		if s.Spec.NodeName == "node-a" {
			f.finish(s, v1alpha2.PodSucceeded, "")
		}
	}
	f.now = f.now.Add(2 * time.Second)
	if again := f.reconcile(); again <= 0 {
		t.Errorf("no look again scheduled for the silent node's expiry")
	}
	if complete(f.notification()) {
		t.Fatal("complete before the silent node expired")
	}
	f.now = f.now.Add(2 * time.Minute)
	f.reconcile()
	f.now = f.now.Add(2 * time.Second)
	f.reconcile()
	n := f.notification()
	if n.Status.Succeeded != 1 || n.Status.Failed != 1 || n.Status.Started != 1 || !complete(n) || n.Status.Failures[0].Reason != v1alpha2.ReasonNodeDidNotAnswer {
		t.Errorf("status %+v", n.Status)
	}
}

// TestNewLeaderFinishesFanOut: a leader died after creating one node's share; the next
// creates the rest, and the counts are exact.
func TestNewLeaderFinishesFanOut(t *testing.T) {
	old := created.Add(-time.Hour)
	n := notification()
	f := newFixture(t, n, pod("a1", "node-a", true, old), pod("b1", "node-b", true, old))
	if _, err := f.c.createShare(context.Background(), n, "node-a", 0, []v1alpha2.PodRef{{Name: "a1", UID: "uid-a1"}}); err != nil {
		t.Fatal(err)
	}
	pods := f.c.pods.GetIndexer().List()
	f.leader()
	for _, p := range pods {
		_ = f.c.pods.GetIndexer().Add(p)
	}
	f.reconcile()
	if got := f.notification().Status; got.Selected != 2 || len(f.shares()) != 2 {
		t.Errorf("selected %d, %d shares; want 2 and 2", got.Selected, len(f.shares()))
	}
}

func mustUnstructured(t *testing.T, obj any) *unstructured.Unstructured {
	t.Helper()
	u, err := toUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestFanOutFollowsTheNodes: the fan-out keeps at most FanOutWindow shares created and not
// started; nodes starting theirs make room; a share not started within FanOutStall gives up
// its place (a dead node does not stop the fan-out); Triggered once every share exists.
func TestFanOutFollowsTheNodes(t *testing.T) {
	var pods []*corev1.Pod
	for i := range 100 {
		pods = append(pods, pod(fmt.Sprintf("pod-%03d", i), fmt.Sprintf("node-%03d", i), true, created.Add(-time.Hour)))
	}
	f := newFixture(t, notification(), pods...)
	f.c.o.FanOutWindow, f.c.o.FanOutStall = 10, 30*time.Second
	unstarted := func() (all, waiting int) {
		for _, s := range f.shares() {
			all++
			if s.Status.Phase == "" {
				waiting++
			}
		}
		return all, waiting
	}
	start := func(k int) {
		for _, s := range f.shares() {
			if k == 0 {
				return
			}
			if s.Status.Phase == "" {
				s.Status = v1alpha2.NodeNotificationStatus{Phase: v1alpha2.PhaseRunning, Runner: s.Spec.NodeName + "/x"}
				if _, err := f.dyn.Resource(v1alpha2.NodeResource).Namespace("default").UpdateStatus(context.Background(), mustUnstructured(t, s), metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				k--
			}
		}
	}
	if again := f.reconcile(); again <= 0 || again > 30*time.Second {
		t.Errorf("window full: look again in %s, want within the stall time", again)
	}
	if all, waiting := unstarted(); all != 10 || waiting != 10 {
		t.Fatalf("first window: %d shares, %d not started; want 10, 10", all, waiting)
	}
	f.reconcile()
	if all, _ := unstarted(); all != 10 {
		t.Fatalf("no node started, yet %d shares; want 10", all)
	}
	start(4)
	f.reconcile()
	if all, waiting := unstarted(); all != 14 || waiting != 10 {
		t.Fatalf("4 started: %d shares, %d not started; want 14, 10", all, waiting)
	}
	f.now = f.now.Add(31 * time.Second) // the 10 not started stall
	f.reconcile()
	if all, waiting := unstarted(); all != 24 || waiting != 20 {
		t.Fatalf("after the stall: %d shares, %d not started; want 24, 20", all, waiting)
	}
	if decided(f.notification()) {
		t.Fatal("Triggered before every share exists")
	}
	for range 100 {
		start(100)
		f.reconcile()
		if decided(f.notification()) {
			break
		}
	}
	n := f.notification()
	if n.Status.Selected != 100 || n.Status.Nodes != 100 || condition(n, v1alpha2.ConditionTriggered).Status != metav1.ConditionTrue || len(f.shares()) != 100 {
		t.Errorf("after the fan-out: %+v, %d shares", n.Status, len(f.shares()))
	}
}

// TestOneSumPerInterval: results that come in less than WriteInterval after a status write
// are summed and written together once it is over, not one pass over every share each.
func TestOneSumPerInterval(t *testing.T) {
	old := created.Add(-time.Hour)
	f := newFixture(t, notification(), pod("a1", "node-a", true, old), pod("b1", "node-b", true, old))
	f.reconcile() // fan-out, and its status write
	writes := func() int {
		n := 0
		for _, a := range f.dyn.Actions() {
			if a.GetResource() == v1alpha2.Resource && a.GetVerb() == "update" {
				n++
			}
		}
		return n
	}
	before := writes()
	for _, s := range f.shares() {
		f.finish(s, v1alpha2.PodSucceeded, "")
		if again := f.reconcile(); again <= 0 || writes() != before {
			t.Fatalf("within the interval: again %v, %d writes; want a wait and none", again, writes()-before)
		}
	}
	f.now = f.now.Add(time.Second)
	f.reconcile()
	if n := f.notification(); writes() != before+1 || n.Status.Succeeded != 2 {
		t.Errorf("after the interval: %d writes, succeeded %d; want one write with both", writes()-before, n.Status.Succeeded)
	}
}
