package notification

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/notification/v1alpha1"
	"github.com/crishim/crishim/shim/crishimv1"
)

// The reconcile tests run one node's controller against client-go's fake dynamic client,
// with the informer's cache filled by hand: that is how they make the cache lag behind the
// apiserver (the fake's tracker) on purpose. The fake applies a status the way the
// apiserver's server-side apply does for this resource (see applyReactor).

const testNode = "node-a"

// created is when Notification q was created: recent, so that it has not expired.
var created = time.Now().Add(-time.Minute).Truncate(time.Second)

// fixture is one node's controller and what it talks to.
type fixture struct {
	t       *testing.T
	c       *Controller
	dyn     *dynamicfake.FakeDynamicClient
	runner  *countingRunner
	metrics *metrics.Notifications
	reg     *prometheus.Registry // metrics' registry
	events  *record.FakeRecorder
}

func newFixture(t *testing.T, n *v1alpha1.Notification, pods ...*runtimeapi.PodSandbox) *fixture {
	t.Helper()
	dyn := dynamicfake.NewSimpleDynamicClient(scheme, n)
	dyn.PrependReactor("patch", "notifications", applyReactor(dyn.Tracker()))
	reg := prometheus.NewRegistry()
	f := &fixture{t: t, dyn: dyn, runner: &countingRunner{calls: map[string]int{}}, metrics: metrics.NewNotifications(reg), reg: reg, events: record.NewFakeRecorder(10)}
	f.restart(pods...)
	f.cache(n)
	return f
}

// restart is a new crishim process on the same node: nothing remembered, an empty cache.
func (f *fixture) restart(pods ...*runtimeapi.PodSandbox) {
	f.c = New(Options{Dynamic: f.dyn, NodeName: testNode, Pods: fakePods{items: pods}, Runner: f.runner, Metrics: f.metrics,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	f.c.recorder = f.events
}

// cache puts n into the informer's cache as the watch would have delivered it.
func (f *fixture) cache(n *v1alpha1.Notification) {
	f.t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(n)
	if err != nil {
		f.t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(v1alpha1.SchemeGroupVersion.String())
	u.SetKind(v1alpha1.Kind)
	if err := f.c.informer.GetIndexer().Update(u); err != nil {
		f.t.Fatal(err)
	}
}

// catchUp makes the cache what the apiserver holds now.
func (f *fixture) catchUp() *v1alpha1.Notification {
	f.t.Helper()
	n := f.live()
	f.cache(n)
	return n
}

func (f *fixture) live() *v1alpha1.Notification {
	f.t.Helper()
	u, err := f.dyn.Resource(v1alpha1.Resource).Namespace("ns").Get(context.Background(), "q", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	n, err := fromUnstructured(u)
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (f *fixture) reconcile() time.Duration {
	f.t.Helper()
	again, err := f.c.reconcile(context.Background(), "ns/q")
	if err != nil {
		f.t.Fatalf("reconcile: %v", err)
	}
	return again
}

// applied are the statuses this node applied, in order.
func (f *fixture) applied() []v1alpha1.NotificationStatus {
	f.t.Helper()
	var out []v1alpha1.NotificationStatus
	for _, a := range f.dyn.Actions() {
		p, ok := a.(k8stesting.PatchAction)
		if !ok || p.GetPatchType() != types.ApplyPatchType {
			continue
		}
		var n v1alpha1.Notification
		if err := json.Unmarshal(p.GetPatch(), &n); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, n.Status)
	}
	return out
}

func (f *fixture) runs(result string) float64 {
	f.t.Helper()
	fams, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() != "crishim_notifications_runs_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			if m.GetLabel()[0].GetValue() == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func notificationQ(entries ...v1alpha1.PodNotificationStatus) *v1alpha1.Notification {
	return &v1alpha1.Notification{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: v1alpha1.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "ns", UID: "n1", Generation: 1, CreationTimestamp: metav1.NewTime(created)},
		Spec: v1alpha1.NotificationSpec{ContainerNotifierName: "quiesce",
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
		Status: v1alpha1.NotificationStatus{PodNotificationStatuses: entries},
	}
}

// podP1 is this node's pod that Notification q selects.
var podP1 = &runtimeapi.PodSandbox{Id: "sandbox-p1", State: runtimeapi.PodSandboxState_SANDBOX_READY,
	Metadata:    &runtimeapi.PodSandboxMetadata{Name: "p1", Namespace: "ns", Uid: "uid-p1"},
	Labels:      map[string]string{"app": "db"},
	Annotations: map[string]string{"notifier.crishim.io/main.quiesce": `{"exec":["true"]}`},
	CreatedAt:   created.Add(-time.Minute).UnixNano()}

// TestReconcileRunsEachPodOnce: the first reconcile records the run as started, runs the
// notifier and records the result; later ones run nothing, whether the cache has caught up,
// still shows the Notification as it was before the run (a lagging watch), or is a
// restarted process's first view that lags behind the apiserver.
func TestReconcileRunsEachPodOnce(t *testing.T) {
	before := notificationQ()
	f := newFixture(t, before, podP1)
	f.reconcile()
	if got := f.runner.count("sandbox-p1"); got != 1 {
		t.Fatalf("notifier ran %d times, want 1", got)
	}
	applied := f.applied()
	if len(applied) != 2 || !pending(applied[0].PodNotificationStatuses[0]) || !applied[1].PodNotificationStatuses[0].ContainerNotificationStatuses[0].Succeed {
		t.Fatalf("applied %+v, want the started entry, then the result", applied)
	}

	for _, view := range []struct {
		name    string
		cache   func()
		restart bool
	}{
		{name: "cache caught up", cache: func() { f.catchUp() }},
		{name: "cache older than the run", cache: func() { f.cache(before) }},
		{name: "restarted, cache older than the run", cache: func() { f.cache(before) }, restart: true},
		{name: "restarted, cache shows the run started", cache: func() { f.cache(notificationQ(applied[0].PodNotificationStatuses...)) }, restart: true},
	} {
		if view.restart {
			f.restart(podP1)
		}
		view.cache()
		f.reconcile()
		if got := f.runner.count("sandbox-p1"); got != 1 {
			t.Errorf("%s: notifier ran %d times, want 1", view.name, got)
		}
	}
	if e := f.live().Status.PodNotificationStatuses; len(e) != 1 || !e[0].ContainerNotificationStatuses[0].Succeed {
		t.Errorf("stored entries %+v, want the one result", e)
	}
	if got := f.runs("interrupted"); got != 0 {
		t.Errorf("%v runs counted interrupted, want none", got)
	}
}

// TestReconcileRecordsAnInterruptedRunOnce: an entry this node recorded as started, with no
// result and no run in this process, is a run an earlier crishim was cut off in: it is
// recorded failed with reason Interrupted, never run again, and counted once however often
// the stale cache brings it back.
func TestReconcileRecordsAnInterruptedRunOnce(t *testing.T) {
	started := metav1.NewTime(created)
	cut := notificationQ(v1alpha1.PodNotificationStatus{PodName: "p1", PodUID: "uid-p1", NodeName: testNode,
		ContainerNotificationStatuses: []v1alpha1.ContainerNotificationStatus{{ContainerName: "main", Timestamp: &started}}})
	f := newFixture(t, cut, podP1)
	for range 3 {
		f.reconcile() // the cache keeps showing the started entry
	}
	if got := f.runner.count("sandbox-p1"); got != 0 {
		t.Errorf("notifier ran %d times, want none", got)
	}
	e := f.live().Status.PodNotificationStatuses
	if len(e) != 1 || e[0].ContainerNotificationStatuses[0].Error == nil || e[0].ContainerNotificationStatuses[0].Error.Reason != reasonInterrupted {
		t.Fatalf("stored entries %+v, want the run marked %s", e, reasonInterrupted)
	}
	if got := f.runs("interrupted"); got != 1 {
		t.Errorf("%v runs counted interrupted, want 1", got)
	}
}

// TestReconcileTrustsTheAPIServerOverAStaleCache: a restarted crishim whose cache still
// shows its own started entry, while the apiserver already holds the result the previous
// process wrote, does not call that run interrupted.
func TestReconcileTrustsTheAPIServerOverAStaleCache(t *testing.T) {
	started := metav1.NewTime(created)
	entryStarted := v1alpha1.PodNotificationStatus{PodName: "p1", PodUID: "uid-p1", NodeName: testNode,
		ContainerNotificationStatuses: []v1alpha1.ContainerNotificationStatus{{ContainerName: "main", Timestamp: &started}}}
	done := entryStarted
	done.ContainerNotificationStatuses = []v1alpha1.ContainerNotificationStatus{{ContainerName: "main", Timestamp: &started, Succeed: true}}
	f := newFixture(t, notificationQ(done), podP1)
	f.cache(notificationQ(entryStarted))
	f.reconcile()
	if got := f.runs("interrupted"); got != 0 {
		t.Errorf("%v runs counted interrupted, want none", got)
	}
	if e := f.live().Status.PodNotificationStatuses; len(e) != 1 || !e[0].ContainerNotificationStatuses[0].Succeed {
		t.Errorf("stored entries %+v, want the result kept", e)
	}
	if got := f.runner.count("sandbox-p1"); got != 0 {
		t.Errorf("notifier ran %d times, want none", got)
	}
}

// TestReconcileDoesNotDecideOnACacheBehindAnotherWrite: when the cache lacks an entry the
// apiserver has for this node's pod, nothing runs and nothing is written on the old view
// (such as "no selected pods"); the watch brings the write and the Notification back.
func TestReconcileDoesNotDecideOnACacheBehindAnotherWrite(t *testing.T) {
	started := metav1.NewTime(created)
	recorded := v1alpha1.PodNotificationStatus{PodName: "p1", PodUID: "uid-p1", NodeName: testNode,
		ContainerNotificationStatuses: []v1alpha1.ContainerNotificationStatus{{ContainerName: "main", Timestamp: &started, Succeed: true}}}
	f := newFixture(t, notificationQ(recorded), podP1)
	f.cache(notificationQ())
	f.reconcile()
	if got := f.runner.count("sandbox-p1"); got != 0 {
		t.Errorf("notifier ran %d times, want none", got)
	}
	if a := f.applied(); len(a) != 0 {
		t.Errorf("applied %+v on a stale view, want nothing", a)
	}
}

// TestFailedNotifierRecordsAWarningEventOnce: a failed run is an Event on the Notification,
// through the recorder (so the broadcaster's dedup and rate limits apply), and only the run
// makes one.
func TestFailedNotifierRecordsAWarningEventOnce(t *testing.T) {
	f := newFixture(t, notificationQ(), podP1)
	f.runner.fail = &crishimv1.NotificationError{Type: "Error", Reason: "ActionFailed", Message: "exited with code 3"}
	f.reconcile()
	f.catchUp()
	f.reconcile()
	close(f.events.Events)
	var got []string
	for e := range f.events.Events {
		got = append(got, e)
	}
	want := "Warning NotifierFailed pod p1 container main on node node-a: Error ActionFailed: exited with code 3"
	if len(got) != 1 || got[0] != want {
		t.Errorf("events %q, want one %q", got, want)
	}
}

// TestReconcileDeletesAnExpiredNotificationByUID: a completed Notification past its expiry
// is deleted with its UID as precondition (never a new one of the same name); before, the
// reconcile asks to look again when it expires.
func TestReconcileDeletesAnExpiredNotificationByUID(t *testing.T) {
	n := notificationQ()
	n.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNoSelectedPods}}
	f := newFixture(t, n)
	f.c.o.GCAfter = time.Since(created) + time.Hour
	if again := f.reconcile(); again <= 0 || again > time.Hour {
		t.Errorf("look again in %s, want within the hour left", again)
	}
	f.c.o.GCAfter = time.Second
	f.reconcile()
	var deleted bool
	for _, a := range f.dyn.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			pre := d.GetDeleteOptions().Preconditions
			deleted = pre != nil && pre.UID != nil && *pre.UID == "n1"
		}
	}
	if !deleted {
		t.Errorf("actions %v: want a delete with precondition UID n1", f.dyn.Actions())
	}
}

// TestEventSinkAggregatesRepeats: the broadcaster with crishim's sink over the dynamic
// client stores a repeated Event once, counted, not once per occurrence.
func TestEventSinkAggregatesRepeats(t *testing.T) {
	n := notificationQ()
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, map[schema.GroupVersionResource]string{eventsResource: "EventList"}, n)
	wrote := make(chan string, 10)
	sink := recordingSink{&eventSink{ctx: context.Background(), events: dyn.Resource(eventsResource), metrics: metrics.NewNotifications(prometheus.NewRegistry())}, wrote}
	b := record.NewBroadcaster()
	defer b.Shutdown()
	b.StartRecordingToSink(sink)
	rec := b.NewRecorder(scheme, eventSource(testNode))
	for i := range 3 {
		rec.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonFailed, "pod p1 failed")
		if op := <-wrote; (i == 0) != (op == "create") {
			t.Errorf("write %d was a %s", i, op)
		}
	}
	l, err := dyn.Resource(eventsResource).Namespace("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 {
		t.Fatalf("%d Events stored, want 1", len(l.Items))
	}
	var ev corev1.Event
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[0].Object, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Count != 3 || ev.InvolvedObject.Kind != v1alpha1.Kind || ev.InvolvedObject.UID != "n1" || ev.Source.Host != testNode {
		t.Errorf("event %+v: want count 3, about Notification n1, from %s", ev, testNode)
	}
}

// recordingSink tells the test each write the broadcaster made, after it is stored.
type recordingSink struct {
	*eventSink
	wrote chan<- string
}

func (s recordingSink) Create(ev *corev1.Event) (*corev1.Event, error) {
	defer func() { s.wrote <- "create" }()
	return s.eventSink.Create(ev)
}

func (s recordingSink) Patch(ev *corev1.Event, data []byte) (*corev1.Event, error) {
	defer func() { s.wrote <- "patch" }()
	return s.eventSink.Patch(ev, data)
}

// applyReactor applies a status the way the apiserver does for this resource: entries
// merge by podUID and conditions by type (the list-map keys of the CRD), everything else
// of the object stays, and a UID in the apply that is not the object's is a conflict. Field
// ownership is not modelled: these tests have one node.
func applyReactor(tracker k8stesting.ObjectTracker) k8stesting.ReactionFunc {
	return func(action k8stesting.Action) (bool, runtime.Object, error) {
		p := action.(k8stesting.PatchAction)
		if p.GetPatchType() != types.ApplyPatchType || p.GetSubresource() != "status" {
			return false, nil, nil
		}
		obj, err := tracker.Get(p.GetResource(), p.GetNamespace(), p.GetName())
		if err != nil {
			return true, nil, err
		}
		cur, err := fromUnstructured(obj)
		if err != nil {
			return true, nil, err
		}
		var in v1alpha1.Notification
		if err := json.Unmarshal(p.GetPatch(), &in); err != nil {
			return true, nil, err
		}
		if in.UID != "" && in.UID != cur.UID {
			return true, nil, apierrors.NewConflict(v1alpha1.Resource.GroupResource(), p.GetName(), fmt.Errorf("uid %s is not %s", in.UID, cur.UID))
		}
		cur.Status.PodNotificationStatuses = mergeEntries(cur.Status.PodNotificationStatuses, byPod(in.Status.PodNotificationStatuses))
		for _, c := range in.Status.Conditions {
			setCondition(&cur.Status.Conditions, c)
		}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cur)
		if err != nil {
			return true, nil, err
		}
		out := &unstructured.Unstructured{Object: u}
		return true, out, tracker.Update(p.GetResource(), out, p.GetNamespace())
	}
}

func byPod(es []v1alpha1.PodNotificationStatus) map[string]v1alpha1.PodNotificationStatus {
	m := map[string]v1alpha1.PodNotificationStatus{}
	for _, e := range es {
		m[e.PodUID] = e
	}
	return m
}

func setCondition(cs *[]metav1.Condition, c metav1.Condition) {
	for i := range *cs {
		if (*cs)[i].Type == c.Type {
			(*cs)[i] = c
			return
		}
	}
	*cs = append(*cs, c)
}

// fakePods is the runtime's pod list.
type fakePods struct {
	runtimeapi.RuntimeServiceClient // only ListPodSandbox is called
	items                           []*runtimeapi.PodSandbox
}

func (p fakePods) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest, ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: p.items}, nil
}

// countingRunner is crishim's Notify, counting runs per pod; it succeeds unless fail is set.
type countingRunner struct {
	mu    sync.Mutex
	calls map[string]int
	fail  *crishimv1.NotificationError
}

func (r *countingRunner) Notify(_ context.Context, req *crishimv1.NotifyRequest) (*crishimv1.NotifyResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[req.GetPodSandboxId()]++
	c := &crishimv1.ContainerNotification{ContainerName: "main", StartedAt: timestamppb.New(created), Succeeded: r.fail == nil, Error: r.fail}
	return &crishimv1.NotifyResponse{Pods: []*crishimv1.PodNotification{{PodSandboxId: req.GetPodSandboxId(), Containers: []*crishimv1.ContainerNotification{c}}}}, nil
}

func (r *countingRunner) count(pod string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[pod]
}
