package notification

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/notification/v1alpha1"
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
	// Resync re-examines every Notification this often (expiry, lost updates) [30s].
	Resync time.Duration
	// GCAfter, if set, replaces spec.expirationSeconds for garbage collection (tests).
	GCAfter time.Duration
	// Workers reconcile this many Notifications at once [4].
	Workers int
}

// Controller is one node's share of the Notification API.
type Controller struct {
	o        Options
	log      *slog.Logger
	manager  string // server-side apply field manager: one per node
	queue    workqueue.TypedRateLimitingInterface[string]
	informer cache.SharedIndexInformer
	// recorder sends Events through a broadcaster Run owns, which aggregates repeats and
	// rate-limits them per Notification (client-go's EventCorrelator), so a notifier failing
	// in many pods cannot flood the apiserver with Events.
	recorder record.EventRecorder

	mu       sync.Mutex
	inflight map[string]bool // pod UIDs whose run this process started and has not recorded
	// results are the entries this process wrote, by Notification UID and pod UID, until the
	// Notification is deleted: a reconcile that runs on a cache older than its own last write
	// (a watch that lags, a relist served from a lagging cache) must neither take its own
	// finished run for an interrupted one nor write the stale entry back.
	results map[resultKey]v1alpha1.PodNotificationStatus
}

// New creates a Controller; Run starts it.
func New(o Options) *Controller {
	if o.Resync == 0 {
		o.Resync = 30 * time.Second
	}
	if o.Workers == 0 {
		o.Workers = 4
	}
	c := &Controller{
		o:        o,
		log:      o.Log.With("component", "notifications", "node", o.NodeName),
		manager:  "crishim/" + o.NodeName,
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		inflight: map[string]bool{},
		results:  map[resultKey]v1alpha1.PodNotificationStatus{},
	}
	// A plain informer over the dynamic client: the typed and dynamic informer factories
	// would link every Kubernetes API group into crishim (some 40 MiB) for one resource.
	res := o.Dynamic.Resource(v1alpha1.Resource)
	c.informer = cache.NewSharedIndexInformer(&cache.ListWatch{
		// watch_up and the error count follow what the apiserver answers, not what the cache
		// holds; the reflector retries either call by itself.
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			l, err := res.List(ctx, opts)
			c.watchResult(err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := res.Watch(ctx, opts)
			c.watchResult(err)
			return w, err
		},
	}, &unstructured.Unstructured{}, o.Resync, cache.Indexers{})
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, _ = c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: c.forget,
	})
	return c
}

// watchResult makes an unreachable apiserver a warning and a metric instead of silence; the
// informer reconnects and relists by itself.
func (c *Controller) watchResult(err error) {
	c.o.Metrics.WatchUp(err == nil)
	if err != nil {
		c.o.Metrics.APIError("watch")
		c.log.Warn("list or watch of Notifications failed; retrying", "err", err)
	}
}

// Run serves until ctx ends. The CRI path never waits on it.
func (c *Controller) Run(ctx context.Context) {
	defer c.queue.ShutDown()
	events := record.NewBroadcaster(record.WithContext(ctx))
	defer events.Shutdown()
	events.StartRecordingToSink(&eventSink{ctx: ctx, events: c.o.Dynamic.Resource(eventsResource), metrics: c.o.Metrics})
	c.recorder = events.NewRecorder(scheme, eventSource(c.o.NodeName))
	go c.informer.RunWithContext(ctx)
	c.log.Info("watching Notifications")
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
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	again, err := c.reconcile(ctx, key)
	switch {
	case err != nil:
		c.log.Warn("notification: will retry", "notification", key, "err", err)
		c.queue.AddRateLimited(key)
	case again > 0:
		c.queue.Forget(key)
		c.queue.AddAfter(key, again)
	default:
		c.queue.Forget(key)
	}
	return true
}

// reconcile brings one Notification's status up to date with this node; it returns when to
// look again (expiry) or an error to retry (apiserver or runtime trouble, never a notifier's
// failure: there are no retries of runs).
func (c *Controller) reconcile(ctx context.Context, key string) (time.Duration, error) {
	obj, exists, err := c.informer.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return 0, err
	}
	n, err := fromUnstructured(obj)
	if err != nil {
		return 0, err
	}
	mine := c.ownEntries(n)
	c.overlayResults(n.UID, mine)
	if completed(n) {
		left := expiresIn(n, time.Now(), c.o.GCAfter)
		if left > 0 {
			return left, c.settleConditions(ctx, n, mine)
		}
		return 0, c.delete(ctx, n)
	}
	resp, err := c.o.Pods.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("list this node's pods: %w", err)
	}
	pods, err := selectedPods(n, resp.GetItems())
	if err != nil {
		// A selector the apiserver accepted but that cannot be evaluated: nothing to retry.
		c.log.Warn("notification: bad selector", "notification", key, "err", err)
		return 0, nil
	}
	byUID := map[string]v1alpha1.PodNotificationStatus{}
	for _, e := range n.Status.PodNotificationStatuses {
		byUID[e.PodUID] = e
	}

	// The cache may lag behind the apiserver (and behind this process's own writes after a
	// restart), so before acting on what it lacks, one fresh read confirms it: marking a
	// finished run interrupted would be a lie that no later write corrects, and running a
	// pod whose entry the cache does not show yet would run it twice.
	var live map[string]v1alpha1.PodNotificationStatus
	confirm := func() (err error) {
		if live == nil {
			live, err = c.liveEntries(ctx, n)
		}
		return err
	}

	// Entries this node wrote as started but whose result never came: this process did not
	// start them, so an earlier crishim was cut off mid-run. Record that; never run again.
	changed := false
	for uid, e := range mine {
		if pending(e) && !c.isInflight(uid) {
			if err := confirm(); err != nil {
				return 0, err
			}
			if f, ok := live[uid]; ok && !pending(f) {
				mine[uid] = f
				continue
			}
			mine[uid] = failedEntry(e, reasonInterrupted, "crishim restarted while the notifier ran; it is not run again (no retries: create a new Notification)", time.Now())
			// Kept like a run's result, so a failed write is retried without counting again.
			c.keepResult(n.UID, uid, mine[uid])
			c.o.Metrics.Run("interrupted")
			changed = true
		}
	}
	var toRun []*runtimeapi.PodSandbox
	for _, p := range pods {
		uid := p.GetMetadata().GetUid()
		if _, done := byUID[uid]; !done {
			if _, done := mine[uid]; !done {
				toRun = append(toRun, p)
			}
		}
	}
	if len(toRun) > 0 {
		if err := confirm(); err != nil {
			return 0, err
		}
		stale := len(toRun)
		toRun = slices.DeleteFunc(toRun, func(p *runtimeapi.PodSandbox) bool {
			_, recorded := live[p.GetMetadata().GetUid()]
			return recorded
		})
		if len(toRun) < stale {
			// The cache is behind a write that recorded these pods; its watch event brings
			// that write and this Notification back. Deciding now, on the old view, could
			// only write conditions that the entries contradict.
			return 0, nil
		}
	}
	if len(mine) == 0 && len(toRun) == 0 {
		// Not a participant. Only the first node to look says that nobody was selected; a
		// node with pods replaces it.
		if len(n.Status.PodNotificationStatuses) == 0 && meta.FindStatusCondition(n.Status.Conditions, v1alpha1.ConditionTriggered) == nil {
			return 0, c.apply(ctx, n, nil)
		}
		return 0, nil
	}
	if len(toRun) > 0 {
		return 0, c.run(ctx, n, mine, toRun)
	}
	if changed {
		return 0, c.apply(ctx, n, mine)
	}
	return 0, c.settleConditions(ctx, n, mine)
}

// run records started entries, runs the notifier in each pod (in parallel), and records the
// results. The started entries are written first so that a crishim restart mid-run finds
// them and never runs the notifier twice.
func (c *Controller) run(ctx context.Context, n *v1alpha1.Notification, mine map[string]v1alpha1.PodNotificationStatus, toRun []*runtimeapi.PodSandbox) error {
	now := time.Now()
	for _, p := range toRun {
		uid := p.GetMetadata().GetUid()
		mine[uid] = startedEntry(p, c.o.NodeName, declaringContainers(p.GetAnnotations(), n.Spec.ContainerNotifierName), now)
		c.setInflight(uid, true)
	}
	defer func() {
		for _, p := range toRun {
			c.setInflight(p.GetMetadata().GetUid(), false)
		}
	}()
	if err := c.apply(ctx, n, mine); err != nil {
		// Not recorded, so not run: the retry starts over.
		return err
	}
	results := make([]v1alpha1.PodNotificationStatus, len(toRun))
	var wg sync.WaitGroup
	for i, p := range toRun {
		wg.Add(1)
		started := mine[p.GetMetadata().GetUid()]
		go func() {
			defer wg.Done()
			results[i] = c.runOne(ctx, n, p, started)
		}()
	}
	wg.Wait()
	for _, e := range results {
		mine[e.PodUID] = e
		c.keepResult(n.UID, e.PodUID, e)
	}
	// The runs happened: their results must be written; a failed write is retried from
	// results, without running anything again.
	return c.apply(ctx, n, mine)
}

// resultKey names one pod's entry in one Notification.
type resultKey struct{ notification, pod types.UID }

// keepResult remembers an entry this process wrote (see results).
func (c *Controller) keepResult(notification types.UID, pod string, e v1alpha1.PodNotificationStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.results[resultKey{notification, types.UID(pod)}] = e
}

// overlayResults puts the entries this process wrote over the cache's older copies, and adds
// those the cache does not show yet: a cache older than this process's own writes must
// neither make a finished run look interrupted nor a recorded pod look never run.
func (c *Controller) overlayResults(notification types.UID, mine map[string]v1alpha1.PodNotificationStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, r := range c.results {
		if k.notification == notification {
			mine[string(k.pod)] = r
		}
	}
}

// forget drops a deleted Notification's results.
func (c *Controller) forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.results {
		if k.notification == u.GetUID() {
			delete(c.results, k)
		}
	}
}

// liveEntries reads the Notification's entries from the apiserver, not the cache, by pod
// UID: every node's, for a pod is recorded once whoever recorded it. A Notification
// deleted and recreated under the same name has none of the old one's entries.
func (c *Controller) liveEntries(ctx context.Context, n *v1alpha1.Notification) (map[string]v1alpha1.PodNotificationStatus, error) {
	u, err := c.o.Dynamic.Resource(v1alpha1.Resource).Namespace(n.Namespace).Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		c.o.Metrics.APIError("get")
		return nil, fmt.Errorf("read notification %s/%s: %w", n.Namespace, n.Name, err)
	}
	live, err := fromUnstructured(u)
	if err != nil {
		return nil, err
	}
	entries := map[string]v1alpha1.PodNotificationStatus{}
	if live.UID != n.UID {
		return entries, nil
	}
	for _, e := range live.Status.PodNotificationStatuses {
		entries[e.PodUID] = e
	}
	return entries, nil
}

// runOne runs the notifier in one pod; started is the entry recorded before the run, which a
// run crishim could not do at all keeps, with its start time, marked failed.
func (c *Controller) runOne(ctx context.Context, n *v1alpha1.Notification, p *runtimeapi.PodSandbox, started v1alpha1.PodNotificationStatus) v1alpha1.PodNotificationStatus {
	log := c.log.With("notification", n.Namespace+"/"+n.Name, "pod", p.GetMetadata().GetNamespace()+"/"+p.GetMetadata().GetName(), "notifier", n.Spec.ContainerNotifierName)
	log.Info("notification: running notifier")
	resp, err := c.o.Runner.Notify(ctx, &crishimv1.NotifyRequest{PodSandboxId: p.GetId(), Notifier: n.Spec.ContainerNotifierName})
	var e v1alpha1.PodNotificationStatus
	if err != nil || len(resp.GetPods()) != 1 {
		e = failedEntry(started, reasonRunFailed, fmt.Sprintf("crishim could not run the notifier: %v", err), time.Now())
	} else {
		e = resultEntry(p, c.o.NodeName, resp.GetPods()[0], time.Now())
	}
	result := "succeeded"
	for _, s := range e.ContainerNotificationStatuses {
		if s.Error != nil {
			result = "failed"
			log.Warn("notification: notifier failed", "container", s.ContainerName, "errorType", s.Error.ErrorType, "reason", s.Error.Reason, "message", s.Error.Message)
			c.recorder.Eventf(n, corev1.EventTypeWarning, v1alpha1.ReasonFailed, "pod %s container %s on node %s: %s %s: %s",
				e.PodName, s.ContainerName, c.o.NodeName, s.Error.ErrorType, s.Error.Reason, s.Error.Message)
		}
	}
	if result == "succeeded" {
		log.Info("notification: notifier succeeded")
	}
	c.o.Metrics.Run(result)
	return e
}

// settleConditions rewrites the conditions when what the entries now say differs from
// what is stored: the last writer may have computed them before another node's entries
// arrived. Only nodes with entries (mine, newer than the cache where this process wrote
// them) take part.
func (c *Controller) settleConditions(ctx context.Context, n *v1alpha1.Notification, mine map[string]v1alpha1.PodNotificationStatus) error {
	if len(mine) == 0 {
		return nil
	}
	want := conditions(mergeEntries(n.Status.PodNotificationStatuses, mine), n.Spec.ContainerNotifierName, n.Generation, n.Status.Conditions, time.Now())
	if sameConditions(want, n.Status.Conditions) {
		return nil
	}
	return c.apply(ctx, n, mine)
}

func (c *Controller) ownEntries(n *v1alpha1.Notification) map[string]v1alpha1.PodNotificationStatus {
	mine := map[string]v1alpha1.PodNotificationStatus{}
	for _, e := range n.Status.PodNotificationStatuses {
		if e.NodeName == c.o.NodeName {
			mine[e.PodUID] = e
		}
	}
	return mine
}

func (c *Controller) isInflight(uid string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inflight[uid]
}

func (c *Controller) setInflight(uid string, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on {
		c.inflight[uid] = true
	} else {
		delete(c.inflight, uid)
	}
}

func (c *Controller) delete(ctx context.Context, n *v1alpha1.Notification) error {
	uid := n.UID
	err := c.o.Dynamic.Resource(v1alpha1.Resource).Namespace(n.Namespace).Delete(ctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil:
		c.o.Metrics.Deleted()
		c.log.Info("notification: expired, deleted", "notification", n.Namespace+"/"+n.Name)
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // another node was first
	default:
		c.o.Metrics.APIError("delete")
		return fmt.Errorf("delete expired notification %s/%s: %w", n.Namespace, n.Name, err)
	}
}

func fromUnstructured(obj any) (*v1alpha1.Notification, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, errors.New("notification informer returned a non-unstructured object")
	}
	var n v1alpha1.Notification
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &n); err != nil {
		return nil, fmt.Errorf("decode notification %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &n, nil
}
