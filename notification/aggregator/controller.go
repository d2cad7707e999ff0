package aggregator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/crishim/crishim/notification/v1alpha2"
)

// Options wire a Controller.
type Options struct {
	Kube    kubernetes.Interface // pods, Events
	Dynamic dynamic.Interface    // Notifications, NodeNotifications
	Log     *slog.Logger
	// AnswerTimeout: a share its node has not started this long after it was created is
	// Expired, its pods failed with NodeDidNotAnswer [5m].
	AnswerTimeout time.Duration
	// ResultTimeout: a share started this long ago without a result is Expired, its running
	// pods failed with ResultLost [30m; notifiers have their own, shorter, timeouts].
	ResultTimeout time.Duration
	// WriteInterval: at most one status write per Notification per interval, however many
	// shares report in it [1s].
	WriteInterval time.Duration
	// GCAfter, if set, replaces spec.expirationSeconds for garbage collection (tests).
	GCAfter time.Duration
	// Workers reconcile this many Notifications at once [4].
	Workers int
	// FanOutWindow bounds the shares of one Notification created and not yet started by
	// their nodes [256]: the fan-out keeps at most this far ahead of what the nodes show they
	// receive. It mattered when every node watched the shares (each event was filtered
	// against every node's watch, and a burst overflowed the watchers' buffers: at 1,000
	// nodes a window of 32 closed 3,513 watchers); with the inboxes, watched by name, a
	// node's watch carries only its own events, and the window only keeps a fan-out to
	// nodes that do not answer from running far ahead of them.
	FanOutWindow int
	// FanOutStall: a share not started this long after its creation no longer holds its
	// place in the window (a node down or slow must not stop the fan-out) [30s].
	FanOutStall time.Duration
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Controller is the aggregator.
type Controller struct {
	o     Options
	log   *slog.Logger
	queue workqueue.TypedRateLimitingInterface[string]
	// inboxQueue holds node names whose NotificationInbox may lack a share (inbox.go).
	inboxQueue workqueue.TypedRateLimitingInterface[string]
	notifs     cache.SharedIndexInformer
	shares     cache.SharedIndexInformer
	inboxes    cache.SharedIndexInformer
	pods       cache.SharedIndexInformer
	factory    informers.SharedInformerFactory
	dfactory   dynamicinformer.DynamicSharedInformerFactory
	recorder   record.EventRecorder
	events     record.EventBroadcaster

	mu        sync.Mutex
	lastWrite map[types.UID]time.Time
	// fanning is the fan-out under way per Notification UID, in this process: the
	// selection, fixed at its start, and the shares created that the cache may not show
	// yet. Lost with the process; a new leader selects again and finds the shares made.
	fanning map[types.UID]*fanOutState
}

type fanOutState struct {
	sel     selection
	created map[string]*v1alpha2.NodeNotification // by name
	written bool                                  // Triggered is written
}

// fanOutParallel bounds the share creates in flight at once.
const fanOutParallel = 32

// inboxWorkers write this many nodes' inboxes at once.
const inboxWorkers = 16

// byParent indexes NodeNotifications by their Notification's UID.
const byParent = "notification-uid"

// New creates a Controller; Run starts it.
func New(o Options) *Controller {
	if o.AnswerTimeout == 0 {
		o.AnswerTimeout = 5 * time.Minute
	}
	if o.ResultTimeout == 0 {
		o.ResultTimeout = 30 * time.Minute
	}
	if o.WriteInterval == 0 {
		o.WriteInterval = time.Second
	}
	if o.Workers == 0 {
		o.Workers = 4
	}
	if o.FanOutWindow == 0 {
		o.FanOutWindow = 256
	}
	if o.FanOutStall == 0 {
		o.FanOutStall = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{
		o:          o,
		log:        o.Log.With("component", "notification-controller"),
		queue:      workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		inboxQueue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		lastWrite:  map[types.UID]time.Time{},
		fanning:    map[types.UID]*fanOutState{},
	}
	c.factory = informers.NewSharedInformerFactoryWithOptions(o.Kube, 0, informers.WithTransform(slimPod))
	c.pods = c.factory.Core().V1().Pods().Informer()
	c.dfactory = dynamicinformer.NewDynamicSharedInformerFactory(o.Dynamic, 10*time.Minute)
	c.notifs = c.dfactory.ForResource(v1alpha2.Resource).Informer()
	c.shares = c.dfactory.ForResource(v1alpha2.NodeResource).Informer()
	c.inboxes = c.dfactory.ForResource(v1alpha2.InboxResource).Informer()
	_ = c.shares.AddIndexers(cache.Indexers{
		byParent: func(obj any) ([]string, error) {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				return []string{u.GetLabels()[v1alpha2.LabelNotificationUID]}, nil
			}
			return nil, nil
		},
		byNode: func(obj any) ([]string, error) { return []string{shareNode(obj)}, nil },
	})
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, _ = c.notifs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: c.forget,
	})
	parent := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if u, ok := obj.(*unstructured.Unstructured); ok {
			name, _, _ := unstructured.NestedString(u.Object, "spec", "notificationName")
			c.queue.Add(u.GetNamespace() + "/" + name)
		}
	}
	_, _ = c.shares.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			parent(obj)
			c.inboxQueue.Add(shareNode(obj)) // list it in its node's inbox
		},
		UpdateFunc: func(_, obj any) {
			parent(obj)
			// A finished share makes room in a full inbox for one that waits.
			if u, ok := obj.(*unstructured.Unstructured); ok && !shareOpen(u) && c.inboxFull(shareNode(obj)) {
				c.inboxQueue.Add(shareNode(obj))
			}
		},
	})
	c.events = record.NewBroadcaster()
	c.recorder = c.events.NewRecorder(eventScheme, corev1.EventSource{Component: "crishim-notification-controller"})
	return c
}

// eventScheme names a Notification in an Event's involvedObject.
var eventScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = scheme.AddToScheme(s)
	s.AddKnownTypes(v1alpha2.SchemeGroupVersion, &v1alpha2.Notification{}, &v1alpha2.NotificationList{})
	return s
}()

// Run serves until ctx ends (the leader's term).
func (c *Controller) Run(ctx context.Context) {
	defer c.queue.ShutDown()
	defer c.inboxQueue.ShutDown()
	c.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.o.Kube.CoreV1().Events("")})
	defer c.events.Shutdown()
	c.factory.Start(ctx.Done())
	c.dfactory.Start(ctx.Done())
	defer c.factory.Shutdown()
	defer c.dfactory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.pods.HasSynced, c.notifs.HasSynced, c.shares.HasSynced, c.inboxes.HasSynced) {
		return
	}
	c.log.Info("aggregating Notifications")
	var wg sync.WaitGroup
	for range c.o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.next(ctx) {
			}
		}()
	}
	// Inboxes are per node, and a fleet's first Notification creates each (two round trips:
	// its Node, then the inbox): more workers than Notifications need.
	for range inboxWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.nextInbox(ctx) {
			}
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	c.inboxQueue.ShutDown()
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

// reconcile takes one Notification a step: fan out, expire silent shares, sum up, collect
// when expired. It returns when to look again.
func (c *Controller) reconcile(ctx context.Context, key string) (time.Duration, error) {
	obj, exists, err := c.notifs.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return 0, err
	}
	n, err := decodeNotification(obj)
	if err != nil {
		return 0, err
	}
	now := c.o.Now()
	if complete(n) {
		if left := expiresIn(n, now, c.o.GCAfter); left > 0 {
			return left, nil
		}
		return 0, c.delete(ctx, n)
	}
	if !decided(n) {
		return c.fanOut(ctx, n, now)
	}
	c.mu.Lock()
	delete(c.fanning, n.UID)
	c.mu.Unlock()
	if wait := c.writeWait(n.UID, now); wait > 0 {
		// Written less than WriteInterval ago: sum up once the interval is over, in one
		// pass for every result that came in meanwhile. Summing decodes every share, so
		// doing it on each share's event would cost O(N) per event, O(N²) per Notification.
		return wait, nil
	}
	children, err := c.children(n)
	if err != nil {
		return 0, err
	}
	again, err := c.expire(ctx, children, now)
	if err != nil {
		return 0, err
	}
	st := summarize(n, children, now)
	if st.Selected < n.Status.Selected {
		// The cache has not caught up with every share created at fan-out: their ADDED
		// events bring this Notification back. Counts from a partial view would go down.
		return again, nil
	}
	if sameStatus(st, n.Status) {
		return again, nil
	}
	failedNow := !isFalse(n, v1alpha2.ConditionSucceeded) && isFalseIn(st, v1alpha2.ConditionSucceeded)
	if err := c.writeStatus(ctx, n, st); err != nil {
		return 0, err
	}
	if failedNow {
		c.recorder.Event(n, corev1.EventTypeWarning, v1alpha2.ReasonFailed, conditionMessage(st, v1alpha2.ConditionSucceeded))
	}
	return again, nil
}

// fanOut selects the pods and creates each node's shares, at most FanOutWindow of them
// created and not yet started at a time, then records the selection (Triggered). It returns
// after each window's worth: the shares' events (their nodes starting them) bring the
// Notification back for the next. The shares' names are fixed by (Notification, node,
// shard), so a leader that died half-way is followed by one that finds the shares made so
// far (in its cache, or AlreadyExists) and makes the rest; Selected is then counted from
// the shares, as they are.
func (c *Controller) fanOut(ctx context.Context, n *v1alpha2.Notification, now time.Time) (time.Duration, error) {
	c.mu.Lock()
	fs := c.fanning[n.UID]
	c.mu.Unlock()
	if fs != nil && fs.written {
		return 0, nil // the cache is behind the Triggered write; its event follows
	}
	if fs == nil {
		var pods []*corev1.Pod
		for _, o := range c.pods.GetIndexer().List() {
			if p, ok := o.(*corev1.Pod); ok && p.Namespace == n.Namespace {
				pods = append(pods, p)
			}
		}
		sel, err := selectPods(n, pods)
		if err != nil {
			// The apiserver accepted a selector that cannot be evaluated: nothing to retry.
			c.log.Warn("notification: bad selector", "notification", n.Namespace+"/"+n.Name, "err", err)
			return 0, nil
		}
		fs = &fanOutState{sel: sel, created: map[string]*v1alpha2.NodeNotification{}}
		c.mu.Lock()
		c.fanning[n.UID] = fs
		c.mu.Unlock()
	}
	// What exists, read from the cache without decoding each share: this runs once per
	// window, and a decode of every share each time would grow with the square of N.
	objs, err := c.shares.GetIndexer().ByIndex(byParent, string(n.UID))
	if err != nil {
		return 0, err
	}
	type view struct {
		phase   string
		created time.Time
	}
	have := make(map[string]view, len(objs)+len(fs.created))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
			have[u.GetName()] = view{phase, u.GetCreationTimestamp().Time}
		}
	}
	for name, nn := range fs.created {
		if _, ok := have[name]; !ok {
			have[name] = view{nn.Status.Phase, nn.CreationTimestamp.Time} // made just now, not in the cache yet
		}
	}
	// In the window: shares not started, until they stall. again: when the first stalls.
	waiting, again := 0, c.o.FanOutStall
	for _, v := range have {
		if left := v.created.Add(c.o.FanOutStall).Sub(now); v.phase == "" && left > 0 {
			waiting++
			again = min(again, left)
		}
	}
	type todo struct {
		node  string
		shard int
		refs  []v1alpha2.PodRef
	}
	var missing []todo
	nodes := make([]string, 0, len(fs.sel.byNode))
	for node := range fs.sel.byNode {
		nodes = append(nodes, node)
	}
	sort.Strings(nodes)
	for _, node := range nodes {
		for i, shard := range shards(fs.sel.byNode[node]) {
			if _, ok := have[v1alpha2.NodeNotificationName(n.Name, string(n.UID), node, i)]; !ok {
				missing = append(missing, todo{node, i, shard})
			}
		}
	}
	if room := c.o.FanOutWindow - waiting; len(missing) > 0 && room > 0 {
		batch := missing[:min(room, len(missing))]
		missing = missing[len(batch):]
		// Creates in parallel: one at a time, a create's round trip (tens of ms on a busy
		// apiserver) would be the run's longest part.
		var mu sync.Mutex
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(fanOutParallel)
		for _, t := range batch {
			g.Go(func() error {
				nn, err := c.createShare(gctx, n, t.node, t.shard, t.refs)
				if err != nil {
					return err
				}
				mu.Lock()
				fs.created[nn.Name], have[nn.Name] = nn, view{nn.Status.Phase, nn.CreationTimestamp.Time}
				mu.Unlock()
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return 0, err
		}
	}
	if len(missing) > 0 {
		// The window is full: the nodes' starts (share events) requeue this Notification;
		// the stall time frees the places of the nodes that do not start.
		return again, nil
	}
	children, err := c.children(n)
	if err != nil {
		return 0, err
	}
	for _, nn := range children {
		delete(fs.created, nn.Name)
	}
	for _, nn := range fs.created {
		children = append(children, nn) // made just now, not in the cache yet
	}
	st := summarize(n, children, now)
	st.WithoutNotifier = fs.sel.withoutNotifier
	if err := c.writeStatus(ctx, n, st); err != nil {
		return 0, err
	}
	// Kept until the cache shows the Notification decided: a view from before this write
	// must not fan out (and write) again.
	fs.written = true
	c.log.Info("notification: fanned out", "notification", n.Namespace+"/"+n.Name, "selected", st.Selected, "nodes", st.Nodes, "withoutNotifier", st.WithoutNotifier)
	return 0, nil
}

func (c *Controller) createShare(ctx context.Context, n *v1alpha2.Notification, node string, shard int, refs []v1alpha2.PodRef) (*v1alpha2.NodeNotification, error) {
	yes := true
	nn := &v1alpha2.NodeNotification{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha2.SchemeGroupVersion.String(), Kind: v1alpha2.NodeKind},
		ObjectMeta: metav1.ObjectMeta{
			Name:      v1alpha2.NodeNotificationName(n.Name, string(n.UID), node, shard),
			Namespace: n.Namespace,
			Labels:    map[string]string{v1alpha2.LabelNotificationUID: string(n.UID)},
			// Deleting the Notification deletes its shares (the garbage collector).
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha2.SchemeGroupVersion.String(), Kind: v1alpha2.Kind,
				Name: n.Name, UID: n.UID, Controller: &yes}},
		},
		Spec: v1alpha2.NodeNotificationSpec{NodeName: node, NotificationName: n.Name, NotificationUID: string(n.UID),
			ContainerNotifierName: n.Spec.ContainerNotifierName, Pods: refs},
	}
	if len(n.Name) <= 63 {
		nn.Labels[v1alpha2.LabelNotificationName] = n.Name
	}
	u, err := toUnstructured(nn)
	if err != nil {
		return nil, err
	}
	res := c.o.Dynamic.Resource(v1alpha2.NodeResource).Namespace(n.Namespace)
	got, err := res.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = res.Get(ctx, nn.Name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("create share %s of %s/%s for node %s: %w", nn.Name, n.Namespace, n.Name, node, err)
	}
	return decodeShare(got)
}

// children are the Notification's shares, from the cache.
func (c *Controller) children(n *v1alpha2.Notification) ([]*v1alpha2.NodeNotification, error) {
	objs, err := c.shares.GetIndexer().ByIndex(byParent, string(n.UID))
	if err != nil {
		return nil, err
	}
	out := make([]*v1alpha2.NodeNotification, 0, len(objs))
	for _, o := range objs {
		nn, err := decodeShare(o)
		if err != nil {
			return nil, err
		}
		out = append(out, nn)
	}
	return out, nil
}

// expire records, in the share itself, that its node did not start it (or did not finish
// it) in time: a write conditional on the resourceVersion seen, so that of this and the
// node's own write exactly one lands, and a node's late start is refused instead of counted
// twice. It returns when the next share would expire.
func (c *Controller) expire(ctx context.Context, children []*v1alpha2.NodeNotification, now time.Time) (time.Duration, error) {
	var next time.Duration
	later := func(d time.Duration) {
		if d > 0 && (next == 0 || d < next) {
			next = d
		}
	}
	for i, nn := range children {
		var reason, msg string
		switch nn.Status.Phase {
		case "":
			left := nn.CreationTimestamp.Add(c.o.AnswerTimeout).Sub(now)
			if left > 0 {
				later(left)
				continue
			}
			reason, msg = v1alpha2.ReasonNodeDidNotAnswer, fmt.Sprintf("node %s did not start within %s; not run", nn.Spec.NodeName, c.o.AnswerTimeout)
		case v1alpha2.PhaseRunning:
			start := nn.CreationTimestamp.Time
			if nn.Status.StartedAt != nil {
				start = nn.Status.StartedAt.Time
			}
			left := start.Add(c.o.ResultTimeout).Sub(now)
			if left > 0 {
				later(left)
				continue
			}
			reason, msg = v1alpha2.ReasonResultLost, fmt.Sprintf("node %s started but recorded no result within %s", nn.Spec.NodeName, c.o.ResultTimeout)
		default:
			continue
		}
		out := nn.DeepCopy()
		out.Status.Phase = v1alpha2.PhaseExpired
		t := metav1.NewTime(now)
		out.Status.FinishedAt = &t
		if nn.Status.Phase == "" {
			out.Status.Pods = nil
			for _, p := range nn.Spec.Pods {
				out.Status.Pods = append(out.Status.Pods, v1alpha2.PodResult{Name: p.Name, UID: p.UID, State: v1alpha2.PodFailed, Reason: reason, Message: v1alpha2.Bound(msg, v1alpha2.MaxMessage)})
			}
		} else {
			for j := range out.Status.Pods {
				if out.Status.Pods[j].State == v1alpha2.PodRunning {
					out.Status.Pods[j].State, out.Status.Pods[j].Reason, out.Status.Pods[j].Message = v1alpha2.PodFailed, reason, v1alpha2.Bound(msg, v1alpha2.MaxMessage)
				}
			}
		}
		u, err := toUnstructured(out)
		if err != nil {
			return 0, err
		}
		got, err := c.o.Dynamic.Resource(v1alpha2.NodeResource).Namespace(nn.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			return 0, fmt.Errorf("expire %s/%s: the node wrote first; its event follows: %w", nn.Namespace, nn.Name, err)
		}
		if err != nil {
			return 0, fmt.Errorf("expire %s/%s: %w", nn.Namespace, nn.Name, err)
		}
		c.log.Warn("notification: share expired", "nodenotification", nn.Namespace+"/"+nn.Name, "node", nn.Spec.NodeName, "reason", reason)
		if children[i], err = decodeShare(got); err != nil {
			return 0, err
		}
	}
	return next, nil
}

// writeWait is how long to wait before the next status write of a Notification, so that
// one write carries every result that came in during WriteInterval.
func (c *Controller) writeWait(uid types.UID, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastWrite[uid].Add(c.o.WriteInterval).Sub(now)
}

func (c *Controller) writeStatus(ctx context.Context, n *v1alpha2.Notification, st v1alpha2.NotificationStatus) error {
	out := n.DeepCopy()
	out.Status = st
	out.APIVersion, out.Kind = v1alpha2.SchemeGroupVersion.String(), v1alpha2.Kind
	u, err := toUnstructured(out)
	if err != nil {
		return err
	}
	// Conditional on the resourceVersion read: the counts are written from a view at least
	// as new as the stored ones, never over a newer write.
	if _, err := c.o.Dynamic.Resource(v1alpha2.Resource).Namespace(n.Namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("write status of %s/%s: %w", n.Namespace, n.Name, err)
	}
	c.mu.Lock()
	c.lastWrite[n.UID] = c.o.Now()
	c.mu.Unlock()
	return nil
}

func (c *Controller) delete(ctx context.Context, n *v1alpha2.Notification) error {
	uid := n.UID
	err := c.o.Dynamic.Resource(v1alpha2.Resource).Namespace(n.Namespace).Delete(ctx, n.Name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid},
		PropagationPolicy: ptr(metav1.DeletePropagationBackground),
	})
	switch {
	case err == nil:
		c.log.Info("notification: expired, deleted", "notification", n.Namespace+"/"+n.Name)
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	default:
		return fmt.Errorf("delete expired notification %s/%s: %w", n.Namespace, n.Name, err)
	}
}

// forget drops a deleted Notification's write time; its shares go with it (owner
// references), so nothing else is left.
func (c *Controller) forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		c.mu.Lock()
		delete(c.lastWrite, u.GetUID())
		delete(c.fanning, u.GetUID())
		c.mu.Unlock()
	}
}

func isFalse(n *v1alpha2.Notification, typ string) bool { return isFalseIn(n.Status, typ) }

func isFalseIn(st v1alpha2.NotificationStatus, typ string) bool {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c.Status == metav1.ConditionFalse
		}
	}
	return false
}

func conditionMessage(st v1alpha2.NotificationStatus, typ string) string {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}

func ptr[T any](v T) *T { return &v }

func decodeNotification(obj any) (*v1alpha2.Notification, error) {
	var n v1alpha2.Notification
	return &n, decode(obj, &n)
}

func decodeShare(obj any) (*v1alpha2.NodeNotification, error) {
	var n v1alpha2.NodeNotification
	return &n, decode(obj, &n)
}

// decode turns a cached or returned object into its type (out).
func decode(obj any, out any) error {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return errors.New("informer returned a non-unstructured object")
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return fmt.Errorf("decode %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}
