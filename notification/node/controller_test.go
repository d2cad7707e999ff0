package node

import (
	"context"
	"errors"
	"sync"
	"testing"

	"google.golang.org/grpc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/notification/v1alpha2"
	"github.com/crishim/crishim/shim/crishimv1"
)

// The tests run one node's controller against client-go's fake dynamic client and call
// reconcile as the work queue would, with the share its inbox lists.

const testNode = "node-a"

type fixture struct {
	t      *testing.T
	c      *Controller
	dyn    *dynamicfake.FakeDynamicClient
	runner *countingRunner
	pods   []*runtimeapi.PodSandbox
}

func newFixture(t *testing.T, nn *v1alpha2.NodeNotification, pods ...*runtimeapi.PodSandbox) *fixture {
	t.Helper()
	u := mustUnstructured(t, nn)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{v1alpha2.NodeResource: "NodeNotificationList"}, u)
	f := &fixture{t: t, dyn: dyn, runner: &countingRunner{calls: map[string]int{}}, pods: pods}
	f.restart("first")
	return f
}

// restart is a new crishim process: nothing remembered.
func (f *fixture) restart(id string) {
	f.c = New(Options{Dynamic: f.dyn, NodeName: testNode, Pods: fakePods{items: f.pods}, Runner: f.runner, RunnerID: id})
}

// stored is what the apiserver (the fake's tracker) holds.
func (f *fixture) stored() *v1alpha2.NodeNotification {
	f.t.Helper()
	u, err := f.dyn.Tracker().Get(v1alpha2.NodeResource, "default", "share")
	if err != nil {
		f.t.Fatal(err)
	}
	nn, err := decode(u)
	if err != nil {
		f.t.Fatal(err)
	}
	return nn
}

var listed = v1alpha2.ShareRef{Namespace: "default", Name: "share", UID: "share-uid"}

func (f *fixture) reconcile() error {
	return f.c.reconcile(context.Background(), listed)
}

// reads counts the shares the node read from the apiserver.
func (f *fixture) reads() int {
	n := 0
	for _, a := range f.dyn.Actions() {
		if a.GetVerb() == "get" {
			n++
		}
	}
	return n
}

// statusWrites counts the status updates the node sent.
func (f *fixture) statusWrites() int {
	n := 0
	for _, a := range f.dyn.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

func share(pods ...string) *v1alpha2.NodeNotification {
	nn := &v1alpha2.NodeNotification{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha2.SchemeGroupVersion.String(), Kind: v1alpha2.NodeKind},
		ObjectMeta: metav1.ObjectMeta{Name: "share", Namespace: "default", UID: "share-uid", ResourceVersion: "1"},
		Spec:       v1alpha2.NodeNotificationSpec{NodeName: testNode, NotificationName: "q", NotificationUID: "q-uid", ContainerNotifierName: "quiesce"},
	}
	for _, p := range pods {
		nn.Spec.Pods = append(nn.Spec.Pods, v1alpha2.PodRef{Name: p, UID: "uid-" + p})
	}
	return nn
}

func sandbox(name string, declares bool) *runtimeapi.PodSandbox {
	ann := map[string]string{}
	if declares {
		ann["notifier.crishim.io/main.quiesce"] = `{"exec":["true"]}`
	}
	return &runtimeapi.PodSandbox{Id: "sb-" + name, State: runtimeapi.PodSandboxState_SANDBOX_READY, Annotations: ann,
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "default", Uid: "uid-" + name}}
}

// TestRunsEachPodOnceAndWritesTwice: Running, then Finished with every pod's result: run,
// not found, not declaring the notifier; each pod run once, two status writes in all.
func TestRunsEachPodOnceAndWritesTwice(t *testing.T) {
	f := newFixture(t, share("a", "gone", "plain"), sandbox("a", true), sandbox("plain", false))
	if err := f.reconcile(); err != nil {
		t.Fatal(err)
	}
	st := f.stored().Status
	if st.Phase != v1alpha2.PhaseFinished || st.Runner != testNode+"/first" || st.StartedAt == nil || st.FinishedAt == nil {
		t.Fatalf("status %+v", st)
	}
	want := map[string]string{"a": v1alpha2.PodSucceeded, "gone": v1alpha2.ReasonPodNotFound, "plain": v1alpha2.ReasonNotifierMissing}
	for _, p := range st.Pods {
		got := p.State
		if p.State == v1alpha2.PodFailed {
			got = p.Reason
		}
		if got != want[p.Name] {
			t.Errorf("pod %s: %s, want %s", p.Name, got, want[p.Name])
		}
	}
	if f.runner.count("sb-a") != 1 || f.statusWrites() != 2 {
		t.Errorf("runs %v, status writes %d; want one run, two writes", f.runner.calls, f.statusWrites())
	}
	// The inbox lists it again (another share added): nothing read, run or written.
	reads := f.reads()
	if err := f.reconcile(); err != nil || f.runner.count("sb-a") != 1 || f.statusWrites() != 2 || f.reads() != reads {
		t.Errorf("listed again: err %v, runs %v, writes %d, reads %d (was %d)", err, f.runner.calls, f.statusWrites(), f.reads(), reads)
	}
}

// TestInboxQueuesWhatIsLeft: an inbox event queues the listed shares this process has not
// finished nor is running, and forgets the records of shares no longer listed.
func TestInboxQueuesWhatIsLeft(t *testing.T) {
	f := newFixture(t, share("a"), sandbox("a", true))
	if err := f.reconcile(); err != nil {
		t.Fatal(err)
	}
	other := v1alpha2.ShareRef{Namespace: "default", Name: "other", UID: "other-uid"}
	f.c.inboxChanged(mustUnstructured(t, &v1alpha2.NotificationInbox{
		ObjectMeta: metav1.ObjectMeta{Name: testNode},
		Spec:       v1alpha2.NotificationInboxSpec{Shares: []v1alpha2.ShareRef{listed, other}}}))
	if f.c.queue.Len() != 1 {
		t.Fatalf("queued %d, want only the share not finished", f.c.queue.Len())
	}
	if got, _ := f.c.queue.Get(); got != other {
		t.Errorf("queued %+v, want %+v", got, other)
	}
	f.c.inboxChanged(mustUnstructured(t, &v1alpha2.NotificationInbox{ObjectMeta: metav1.ObjectMeta{Name: testNode}}))
	f.c.mu.Lock()
	left := len(f.c.work)
	f.c.mu.Unlock()
	if left != 0 {
		t.Errorf("%d records kept after the inbox dropped every share", left)
	}
}

// TestGoneOrReplacedShareRunsNothing: a listed share deleted since (its Notification went),
// or made again under the same name (another UID), is not this entry's work.
func TestGoneOrReplacedShareRunsNothing(t *testing.T) {
	f := newFixture(t, share("a"), sandbox("a", true))
	for _, ref := range []v1alpha2.ShareRef{{Namespace: "default", Name: "gone", UID: "gone-uid"}, {Namespace: "default", Name: "share", UID: "older-uid"}} {
		if err := f.c.reconcile(context.Background(), ref); err != nil {
			t.Errorf("%+v: %v", ref, err)
		}
	}
	if f.runner.count("sb-a") != 0 || f.statusWrites() != 0 {
		t.Errorf("runs %v, writes %d; want none", f.runner.calls, f.statusWrites())
	}
}

// TestTimedOutStartThatLandedIsOurs: the Running write answers 504 but is stored; the node
// reads it back, recognises its own start, runs the pod once and records a success, never
// a failure.
func TestTimedOutStartThatLandedIsOurs(t *testing.T) {
	f := newFixture(t, share("a"), sandbox("a", true))
	first := true
	f.dyn.PrependReactor("update", "nodenotifications", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !first {
			return false, nil, nil
		}
		first = false
		obj := a.(k8stesting.UpdateAction).GetObject()
		if err := f.dyn.Tracker().Update(v1alpha2.NodeResource, obj, "default"); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewTimeoutError("request did not complete within the allotted timeout", 1)
	})
	if err := f.reconcile(); err != nil {
		t.Fatal(err)
	}
	st := f.stored().Status
	if st.Phase != v1alpha2.PhaseFinished || len(st.Pods) != 1 || st.Pods[0].State != v1alpha2.PodSucceeded || f.runner.count("sb-a") != 1 {
		t.Errorf("status %+v after a 504 that landed, runs %v; want one run, succeeded", st, f.runner.calls)
	}
}

// TestTimedOutFinishIsRetriedNotRerun: the Finished write fails (not stored); the retry
// writes the kept results without running again.
func TestTimedOutFinishIsRetriedNotRerun(t *testing.T) {
	f := newFixture(t, share("a"), sandbox("a", true))
	updates := 0
	f.dyn.PrependReactor("update", "nodenotifications", func(k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		if updates == 2 {
			return true, nil, apierrors.NewTimeoutError("timeout", 1)
		}
		return false, nil, nil
	})
	if err := f.reconcile(); err == nil {
		t.Fatal("a failed Finished write: want an error to retry")
	}
	if err := f.reconcile(); err != nil {
		t.Fatal(err)
	}
	if st := f.stored().Status; st.Phase != v1alpha2.PhaseFinished || f.runner.count("sb-a") != 1 {
		t.Errorf("status %+v, runs %v", st, f.runner.calls)
	}
}

// TestPredecessorsRunIsInterrupted: Running by another process: recorded Interrupted, not run.
func TestPredecessorsRunIsInterrupted(t *testing.T) {
	nn := share("a")
	nn.Status = v1alpha2.NodeNotificationStatus{Phase: v1alpha2.PhaseRunning, Runner: testNode + "/old",
		Pods: []v1alpha2.PodResult{{Name: "a", UID: "uid-a", State: v1alpha2.PodRunning, Containers: 1}}}
	f := newFixture(t, nn, sandbox("a", true))
	if err := f.reconcile(); err != nil {
		t.Fatal(err)
	}
	st := f.stored().Status
	if st.Phase != v1alpha2.PhaseFinished || st.Pods[0].Reason != v1alpha2.ReasonInterrupted || f.runner.count("sb-a") != 0 {
		t.Errorf("status %+v, runs %v", st, f.runner.calls)
	}
	if _, started, _, failed := f.stored().Counts(); started != 1 || failed != 1 {
		t.Errorf("interrupted pod counts started %d failed %d, want 1 and 1", started, failed)
	}
}

// TestExpiredBeforeStartRunsNothing: the aggregator expired the share; the node's start
// conflicts, it reads Expired, and runs nothing.
func TestExpiredBeforeStartRunsNothing(t *testing.T) {
	nn := share("a")
	f := newFixture(t, nn, sandbox("a", true))
	expired := nn.DeepCopy()
	expired.ResourceVersion = "2"
	expired.Status = v1alpha2.NodeNotificationStatus{Phase: v1alpha2.PhaseExpired,
		Pods: []v1alpha2.PodResult{{Name: "a", UID: "uid-a", State: v1alpha2.PodFailed, Reason: v1alpha2.ReasonNodeDidNotAnswer}}}
	if err := f.dyn.Tracker().Update(v1alpha2.NodeResource, mustUnstructured(t, expired), "default"); err != nil {
		t.Fatal(err)
	}
	f.dyn.PrependReactor("update", "nodenotifications", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(v1alpha2.NodeResource.GroupResource(), "share", errors.New("resourceVersion changed"))
	})
	if err := f.reconcile(); err != nil {
		t.Fatal(err)
	}
	if f.runner.count("sb-a") != 0 || f.stored().Status.Phase != v1alpha2.PhaseExpired {
		t.Errorf("runs %v, phase %s", f.runner.calls, f.stored().Status.Phase)
	}
}

// TestFailedContainersAreBounded: a pod with many failing containers shows two, counts all,
// and no message exceeds the bound.
func TestFailedContainersAreBounded(t *testing.T) {
	pn := &crishimv1.PodNotification{}
	long := string(make([]byte, 10000))
	for _, n := range []string{"a", "b", "c", "d"} {
		pn.Containers = append(pn.Containers, &crishimv1.ContainerNotification{ContainerName: n,
			Error: &crishimv1.NotificationError{Type: "Error", Reason: "ActionFailed", Message: long}})
	}
	r := podResult(v1alpha2.PodResult{Name: "p", UID: "u"}, pn)
	if r.State != v1alpha2.PodFailed || r.Containers != 4 || len(r.FailedContainers) != 2 || len(r.FailedContainers[0].Message) > v1alpha2.MaxMessage {
		t.Errorf("result %+v", r)
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

type fakePods struct {
	runtimeapi.RuntimeServiceClient // only ListPodSandbox is called
	items                           []*runtimeapi.PodSandbox
}

func (p fakePods) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest, ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: p.items}, nil
}

// countingRunner is crishim's Notify, counting runs per pod sandbox; it always succeeds.
type countingRunner struct {
	mu    sync.Mutex
	calls map[string]int
}

func (r *countingRunner) Notify(_ context.Context, req *crishimv1.NotifyRequest) (*crishimv1.NotifyResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[req.GetPodSandboxId()]++
	c := &crishimv1.ContainerNotification{ContainerName: "main", Succeeded: true}
	return &crishimv1.NotifyResponse{Pods: []*crishimv1.PodNotification{{PodSandboxId: req.GetPodSandboxId(), Containers: []*crishimv1.ContainerNotification{c}}}}, nil
}

func (r *countingRunner) count(pod string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[pod]
}

// TestLandedStartUnconfirmedRunsOnce: the Running write is stored but answered 504, and the
// read back fails too (the apiserver was briefly away): the retry finds Running in this
// process's name with nothing run (runs begin only after a confirmed Running), so it runs
// the pods once and records their results, never a false Interrupted.
func TestLandedStartUnconfirmedRunsOnce(t *testing.T) {
	f := newFixture(t, share("a"), sandbox("a", true))
	updates, gets := 0, 0
	f.dyn.PrependReactor("update", "nodenotifications", func(a k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		if updates > 1 {
			return false, nil, nil
		}
		if err := f.dyn.Tracker().Update(v1alpha2.NodeResource, a.(k8stesting.UpdateAction).GetObject(), "default"); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewTimeoutError("request did not complete within the allotted timeout", 1)
	})
	f.dyn.PrependReactor("get", "nodenotifications", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if gets == 2 { // the read back after the 504
			return true, nil, apierrors.NewServiceUnavailable("apiserver shutting down")
		}
		return false, nil, nil
	})
	if err := f.reconcile(); err == nil {
		t.Fatal("an unconfirmed start: want an error to retry")
	}
	if err := f.reconcile(); err != nil {
		t.Fatal(err)
	}
	st := f.stored().Status
	if st.Phase != v1alpha2.PhaseFinished || len(st.Pods) != 1 || st.Pods[0].State != v1alpha2.PodSucceeded || f.runner.count("sb-a") != 1 {
		t.Errorf("status %+v, runs %v; want one run, succeeded", st, f.runner.calls)
	}
}
