package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/notification/v1alpha2"
	"github.com/crishim/crishim/shim/crishimv1"
)

// Runner runs a notifier in one pod: crishim's own Notify (the crishim.v1 API), so a
// Notification's runs behave exactly as `crishimctl notify` (timeouts, probes, errors).
type Runner interface {
	Notify(context.Context, *crishimv1.NotifyRequest) (*crishimv1.NotifyResponse, error)
}

// Options wire a Controller.
type Options struct {
	Dynamic  dynamic.Interface
	NodeName string
	Pods     runtimeapi.RuntimeServiceClient // ListPodSandbox of this node
	Runner   Runner
	Metrics  *metrics.Notifications
	Log      *slog.Logger
	// Resync re-examines every object this often (a lost event) [5m].
	Resync time.Duration
	// Workers handle this many NodeNotifications at once [4].
	Workers int
	// RunnerID names this process in status.runner [random].
	RunnerID string
}

// Controller runs this node's NodeNotifications. It watches one object, the node's
// NotificationInbox, by name, and reads each share the inbox lists: the apiserver's watch
// cache indexes a watch by name, so what the node watches costs the apiserver the same
// whatever the number of nodes.
type Controller struct {
	o        Options
	log      *slog.Logger
	runner   string // status.runner of the objects this process starts
	queue    workqueue.TypedRateLimitingInterface[v1alpha2.ShareRef]
	informer cache.SharedIndexInformer // the inbox
	res      dynamic.NamespaceableResourceInterface

	mu sync.Mutex
	// work is what this process did per object UID, until the inbox no longer lists it: started
	// (so a cache that lags behind this process's own Running write never starts it again)
	// and, once the runs ended, the results, kept until the Finished write lands.
	work map[types.UID]*work
}

type work struct {
	running bool                 // the runs are under way in this process
	results []v1alpha2.PodResult // nil until the runs ended
	rv      string               // resourceVersion the Finished write is based on
	// finished: the Finished write landed; a cache still showing Running (its watch
	// event not in yet) must not make another write.
	finished bool
	started  *metav1.Time
}

// New creates a Controller; Run starts it.
func New(o Options) *Controller {
	if o.Resync == 0 {
		o.Resync = 5 * time.Minute
	}
	if o.Workers == 0 {
		o.Workers = 4
	}
	if o.RunnerID == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		o.RunnerID = hex.EncodeToString(b)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{
		o:      o,
		log:    o.Log.With("component", "notifications", "node", o.NodeName),
		runner: o.NodeName + "/" + o.RunnerID,
		queue:  workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[v1alpha2.ShareRef]()),
		res:    o.Dynamic.Resource(v1alpha2.NodeResource),
		work:   map[types.UID]*work{},
	}
	// Only this node's inbox, by name: the watch cache hands this watch the events of one
	// object, where a selectable field of a custom resource would have it filter every event
	// of every node's shares.
	selector := fields.OneTermEqualSelector("metadata.name", o.NodeName).String()
	inboxes := o.Dynamic.Resource(v1alpha2.InboxResource)
	c.informer = cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			l, err := inboxes.List(ctx, opts)
			c.watchResult(err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			w, err := inboxes.Watch(ctx, opts)
			c.watchResult(err)
			return w, err
		},
	}, &unstructured.Unstructured{}, o.Resync, cache.Indexers{})
	_, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.inboxChanged,
		UpdateFunc: func(_, obj any) { c.inboxChanged(obj) },
		DeleteFunc: func(any) { c.inboxChanged(nil) },
	})
	return c
}

// inboxChanged queues every share the inbox lists that this process has not finished, and
// forgets the records of the shares it no longer lists.
func (c *Controller) inboxChanged(obj any) {
	var in v1alpha2.NotificationInbox
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &in); err != nil {
			c.log.Warn("notification: undecodable inbox", "err", err)
			return
		}
	}
	listed := make(map[types.UID]bool, len(in.Spec.Shares))
	for _, ref := range in.Spec.Shares {
		listed[types.UID(ref.UID)] = true
	}
	c.mu.Lock()
	for uid, w := range c.work {
		if !listed[uid] && !w.running && (w.results == nil || w.finished) {
			delete(c.work, uid)
		}
	}
	var todo []v1alpha2.ShareRef
	for _, ref := range in.Spec.Shares {
		if w := c.work[types.UID(ref.UID)]; w == nil || !w.finished && !w.running {
			todo = append(todo, ref)
		}
	}
	c.mu.Unlock()
	for _, ref := range todo {
		c.queue.Add(ref)
	}
}

// watchResult makes an unreachable apiserver a warning and a metric instead of silence; the
// informer reconnects and relists by itself.
func (c *Controller) watchResult(err error) {
	c.o.Metrics.WatchUp(err == nil)
	if err != nil {
		c.o.Metrics.APIError("watch")
		c.log.Warn("list or watch of this node's NotificationInbox failed; retrying", "err", err)
	}
}

// HasSynced reports whether the first list (or watch-list) of this node's inbox is in: from
// then on the node is watching, and a new share reaches it as one watch event.
func (c *Controller) HasSynced() bool { return c.informer.HasSynced() }

// Run serves until ctx ends. The CRI path never waits on it.
func (c *Controller) Run(ctx context.Context) {
	defer c.queue.ShutDown()
	go c.informer.RunWithContext(ctx)
	c.log.Info("watching this node's NotificationInbox")
	if !cache.WaitForCacheSync(ctx.Done(), c.informer.HasSynced) {
		return
	}
	var wg sync.WaitGroup
	for range c.o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
}

func (c *Controller) next(ctx context.Context) bool {
	ref, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(ref)
	if err := c.reconcile(ctx, ref); err != nil {
		c.log.Warn("notification: will retry", "nodenotification", ref.Namespace+"/"+ref.Name, "err", err)
		c.queue.AddRateLimited(ref)
		return true
	}
	c.queue.Forget(ref)
	return true
}

// reconcile takes one share one step: start it (the Running write, then the runs, then the
// Finished write), record a predecessor's interrupted runs, or retry a Finished write. It
// reads the share from the apiserver, unless this process already finished it or runs it.
func (c *Controller) reconcile(ctx context.Context, ref v1alpha2.ShareRef) error {
	// The queue hands one ref to one worker at a time, so this view of the record holds
	// until start or finish changes it.
	w := c.workOf(types.UID(ref.UID))
	c.mu.Lock()
	done, results, rv := w.finished || w.running, w.results, w.rv
	c.mu.Unlock()
	if done {
		return nil
	}
	obj, err := c.res.Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // its Notification was deleted
	}
	if err != nil {
		c.o.Metrics.APIError("get")
		return fmt.Errorf("read share %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	nn, err := decode(obj)
	if err != nil {
		return err
	}
	if string(nn.UID) != ref.UID || nn.Spec.NodeName != c.o.NodeName {
		return nil // a share of the same name made again, or not this node's: not listed work
	}
	switch nn.Status.Phase {
	case v1alpha2.PhaseFinished, v1alpha2.PhaseExpired:
		return nil
	case v1alpha2.PhaseRunning:
		if nn.Status.Runner != c.runner {
			// A crishim before this one recorded the start and no result: its runs were cut
			// off. Recorded, never run again (no retries, as the proposal says).
			return c.finish(ctx, nn, interrupted(nn), nn.ResourceVersion)
		}
	}
	if results != nil {
		return c.finish(ctx, nn, results, rv) // an earlier Finished write failed
	}
	// Not started, or Running in this process's name: its Running write landed though the
	// answer and the read back failed (a 504, then the apiserver away). Runs begin only
	// after a confirmed Running write, so nothing of it ran yet: start confirms it and runs.
	return c.start(ctx, nn, w)
}

// start lists this node's pods once, records Running (with the pods it will run, and those
// it cannot), runs the notifier in each, and records the results.
func (c *Controller) start(ctx context.Context, nn *v1alpha2.NodeNotification, w *work) error {
	resp, err := c.o.Pods.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list this node's pods: %w", err)
	}
	byUID := map[string]*runtimeapi.PodSandbox{}
	for _, p := range resp.GetItems() {
		if p.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			byUID[p.GetMetadata().GetUid()] = p
		}
	}
	now := metav1.Now()
	pods := make([]v1alpha2.PodResult, len(nn.Spec.Pods))
	sandboxes := make([]*runtimeapi.PodSandbox, len(nn.Spec.Pods))
	for i, ref := range nn.Spec.Pods {
		pods[i] = v1alpha2.PodResult{Name: ref.Name, UID: ref.UID, State: v1alpha2.PodRunning}
		p := byUID[ref.UID]
		switch {
		case p == nil:
			pods[i].State, pods[i].Reason = v1alpha2.PodFailed, v1alpha2.ReasonPodNotFound
			pods[i].Message = "no ready pod sandbox with this UID on the node"
		case len(v1alpha2.DeclaringContainers(p.GetAnnotations(), nn.Spec.ContainerNotifierName)) == 0:
			pods[i].State, pods[i].Reason = v1alpha2.PodFailed, v1alpha2.ReasonNotifierMissing
			pods[i].Message = v1alpha2.Bound(fmt.Sprintf("no container of the pod declares notifier %q", nn.Spec.ContainerNotifierName), v1alpha2.MaxMessage)
		default:
			sandboxes[i] = p
			pods[i].Containers = int32(len(v1alpha2.DeclaringContainers(p.GetAnnotations(), nn.Spec.ContainerNotifierName)))
		}
	}
	c.mu.Lock()
	w.running, w.started = true, &now
	c.mu.Unlock()
	status := v1alpha2.NodeNotificationStatus{Phase: v1alpha2.PhaseRunning, Runner: c.runner, StartedAt: &now, Pods: pods}
	rv, err := nn.ResourceVersion, error(nil)
	if nn.Status.Phase == v1alpha2.PhaseRunning && nn.Status.Runner == c.runner {
		// Recorded already (see reconcile): the pods as recorded then. A recorded failure
		// stands; a pod recorded Running and gone since is not run.
		if len(nn.Status.Pods) != len(pods) {
			return c.finish(ctx, nn, interrupted(nn), nn.ResourceVersion)
		}
		for i, r := range nn.Status.Pods {
			switch {
			case r.State != v1alpha2.PodRunning:
				sandboxes[i] = nil
			case sandboxes[i] == nil:
				r.State, r.Reason, r.Message = pods[i].State, pods[i].Reason, pods[i].Message
			}
			pods[i] = r
		}
		status = nn.Status
		status.Pods = pods
		c.mu.Lock()
		w.running, w.started = true, status.StartedAt
		c.mu.Unlock()
	} else {
		rv, err = c.writeStatus(ctx, nn, nn.ResourceVersion, status)
	}
	if err != nil {
		c.mu.Lock()
		w.running, w.started = false, nil
		c.mu.Unlock()
		if errors.Is(err, errNotOurs) {
			return nil // someone else decided (the aggregator expired it): nothing left here
		}
		return err // not recorded, so not run: the retry starts over
	}
	results := make([]v1alpha2.PodResult, len(pods))
	var wg sync.WaitGroup
	for i := range pods {
		if sandboxes[i] == nil {
			results[i] = pods[i]
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.runOne(ctx, nn, sandboxes[i], pods[i])
		}()
	}
	wg.Wait()
	c.mu.Lock()
	w.running, w.results, w.rv = false, results, rv
	c.mu.Unlock()
	// The runs happened: their results must be written; a failed write is retried from
	// w.results, without running anything again.
	return c.finish(ctx, nn, results, rv)
}

// finish records the results (Finished), based on resourceVersion rv.
func (c *Controller) finish(ctx context.Context, nn *v1alpha2.NodeNotification, results []v1alpha2.PodResult, rv string) error {
	now := metav1.Now()
	st := nn.Status
	if st.Runner == "" {
		st.Runner = c.runner
	}
	if w := c.workOf(nn.UID); w.started != nil && st.StartedAt == nil {
		st.StartedAt = w.started
	}
	st.Phase, st.FinishedAt, st.Pods = v1alpha2.PhaseFinished, &now, results
	_, err := c.writeStatus(ctx, nn, rv, st)
	if err == nil || errors.Is(err, errNotOurs) {
		w := c.workOf(nn.UID)
		c.mu.Lock()
		w.finished = true
		c.mu.Unlock()
		return nil
	}
	return err
}

// errNotOurs: the object's status was decided by another write (the aggregator's expiry, or
// a result already recorded); nothing is left for this node to write.
var errNotOurs = errors.New("status decided elsewhere")

// writeStatus replaces the status, conditional on resourceVersion rv: of two writers racing
// (this node starting, the aggregator expiring it) exactly one wins. A write that failed is
// checked against what the apiserver holds: a timed-out write (a 504) may have landed, and
// this node's own write landed is success, never a failure. It returns the resourceVersion
// the status now has.
func (c *Controller) writeStatus(ctx context.Context, nn *v1alpha2.NodeNotification, rv string, st v1alpha2.NodeNotificationStatus) (string, error) {
	out := nn.DeepCopy()
	out.ResourceVersion, out.Status = rv, st
	out.APIVersion, out.Kind = v1alpha2.SchemeGroupVersion.String(), v1alpha2.NodeKind
	u, err := toUnstructured(out)
	if err != nil {
		return "", err
	}
	got, werr := c.res.Namespace(nn.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if werr == nil {
		return got.GetResourceVersion(), nil
	}
	c.o.Metrics.APIError("update")
	if apierrors.IsNotFound(werr) {
		return "", errNotOurs // deleted: its Notification is gone
	}
	live, err := c.res.Namespace(nn.Namespace).Get(ctx, nn.Name, metav1.GetOptions{})
	if err != nil {
		c.o.Metrics.APIError("get")
		if apierrors.IsNotFound(err) {
			return "", errNotOurs
		}
		return "", fmt.Errorf("write status of %s/%s: %w (and read it back: %v)", nn.Namespace, nn.Name, werr, err)
	}
	l, err := decode(live)
	if err != nil {
		return "", err
	}
	switch {
	case l.UID != nn.UID:
		return "", errNotOurs
	case l.Status.Phase == st.Phase && l.Status.Runner == st.Runner:
		return l.ResourceVersion, nil // it landed
	case l.Status.Phase == v1alpha2.PhaseFinished || l.Status.Phase == v1alpha2.PhaseExpired:
		c.log.Warn("notification: status decided elsewhere", "nodenotification", nn.Namespace+"/"+nn.Name, "phase", l.Status.Phase, "runner", l.Status.Runner)
		return "", errNotOurs
	case st.Phase == v1alpha2.PhaseRunning && l.Status.Phase == v1alpha2.PhaseRunning:
		return "", errNotOurs // another process started it: its watch event follows
	case st.Phase == v1alpha2.PhaseFinished && l.Status.Phase == v1alpha2.PhaseRunning && l.Status.Runner == st.Runner:
		// Still Running, ours: the write did not land. Retry on the current version.
		if w := c.workOf(nn.UID); w.results != nil {
			c.mu.Lock()
			w.rv = l.ResourceVersion
			c.mu.Unlock()
		}
	}
	return "", fmt.Errorf("write status of %s/%s: %w", nn.Namespace, nn.Name, werr)
}

// runOne runs the notifier in one pod.
func (c *Controller) runOne(ctx context.Context, nn *v1alpha2.NodeNotification, p *runtimeapi.PodSandbox, started v1alpha2.PodResult) v1alpha2.PodResult {
	log := c.log.With("notification", nn.Namespace+"/"+nn.Spec.NotificationName, "pod", p.GetMetadata().GetNamespace()+"/"+p.GetMetadata().GetName(), "notifier", nn.Spec.ContainerNotifierName)
	log.Info("notification: running notifier")
	resp, err := c.o.Runner.Notify(ctx, &crishimv1.NotifyRequest{PodSandboxId: p.GetId(), Notifier: nn.Spec.ContainerNotifierName})
	r := started
	if err != nil || len(resp.GetPods()) != 1 {
		r.State, r.Reason = v1alpha2.PodFailed, v1alpha2.ReasonRunFailed
		r.Message = v1alpha2.Bound(fmt.Sprintf("crishim could not run the notifier: %v", err), v1alpha2.MaxMessage)
		log.Warn("notification: could not run", "err", err)
		c.o.Metrics.Run("failed")
		return r
	}
	r = podResult(started, resp.GetPods()[0])
	if r.State == v1alpha2.PodSucceeded {
		log.Info("notification: notifier succeeded")
		c.o.Metrics.Run("succeeded")
	} else {
		for _, f := range r.FailedContainers {
			log.Warn("notification: notifier failed", "container", f.Name, "errorType", f.ErrorType, "reason", f.Reason, "message", f.Message)
		}
		c.o.Metrics.Run("failed")
	}
	return r
}

// podResult turns crishim's Notify answer for one pod into its bounded result: counts, and
// the first failed containers by name.
func podResult(started v1alpha2.PodResult, pn *crishimv1.PodNotification) v1alpha2.PodResult {
	r := started
	r.Containers, r.Succeeded, r.FailedContainers = int32(len(pn.GetContainers())), 0, nil
	for _, ct := range pn.GetContainers() {
		if ct.GetSucceeded() {
			r.Succeeded++
			continue
		}
		if len(r.FailedContainers) == v1alpha2.MaxFailedContainersShown {
			continue
		}
		f := v1alpha2.ContainerFailure{Name: ct.GetContainerName(), ErrorType: v1alpha2.ErrorTypeError}
		if e := ct.GetError(); e != nil {
			if e.GetType() == v1alpha2.ErrorTypeTimeout {
				f.ErrorType = v1alpha2.ErrorTypeTimeout
			}
			f.Reason, f.Message = v1alpha2.Bound(e.GetReason(), v1alpha2.MaxReason), v1alpha2.Bound(e.GetMessage(), v1alpha2.MaxMessage)
		}
		r.FailedContainers = append(r.FailedContainers, f)
	}
	r.State = v1alpha2.PodSucceeded
	if r.Succeeded != r.Containers || r.Containers == 0 {
		r.State = v1alpha2.PodFailed
	}
	return r
}

// interrupted is the result of a predecessor's run cut off: every pod still Running failed
// with reason Interrupted; results it recorded before stay.
func interrupted(nn *v1alpha2.NodeNotification) []v1alpha2.PodResult {
	out := append([]v1alpha2.PodResult(nil), nn.Status.Pods...)
	for i := range out {
		if out[i].State == v1alpha2.PodRunning {
			out[i].State, out[i].Reason = v1alpha2.PodFailed, v1alpha2.ReasonInterrupted
			out[i].Message = "crishim restarted while the notifier ran; it is not run again (no retries)"
		}
	}
	return out
}

func (c *Controller) workOf(uid types.UID) *work {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.work[uid]
	if w == nil {
		w = &work{}
		c.work[uid] = w
	}
	return w
}

func decode(obj any) (*v1alpha2.NodeNotification, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, errors.New("informer returned a non-unstructured object")
	}
	var n v1alpha2.NodeNotification
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &n); err != nil {
		return nil, fmt.Errorf("decode nodenotification %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &n, nil
}

func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}
