package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

const benchLabel = "crishim-bench-node"

// startups follows pods from creation to Ready as a watch on the API server sees them, to
// wake waitReady (the timing that counts is the kubelet's own pod start-up SLI): the first
// event of a pod is its creation (the watch starts before any pod of the turn exists), the
// first with condition Ready=True its start-up's end.
type startups struct {
	mu      sync.Mutex
	created map[string]time.Time
	ready   map[string]time.Duration
	changed chan struct{} // signalled on each pod that becomes Ready
}

func watchStartups(ctx context.Context, cs kubernetes.Interface, ns string) (*startups, error) {
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=" + benchLabel})
	if err != nil {
		return nil, fmt.Errorf("watch pods: %w", err)
	}
	s := &startups{created: map[string]time.Time{}, ready: map[string]time.Duration{}, changed: make(chan struct{}, 1)}
	go func() {
		// Owned by ctx: the turn cancels it when it ends.
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				pod, isPod := ev.Object.(*corev1.Pod)
				if !isPod || ev.Type == watch.Deleted {
					continue
				}
				s.saw(pod, time.Now())
			}
		}
	}()
	return s, nil
}

func (s *startups) saw(pod *corev1.Pod, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uid := string(pod.UID)
	t0, ok := s.created[uid]
	if !ok {
		s.created[uid], t0 = now, now
	}
	if _, done := s.ready[uid]; done || !podReady(pod) {
		return
	}
	s.ready[uid] = now.Sub(t0)
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// deployments are the turn's load: plain pods and a tenth with exec readiness probes, whose
// ExecSync calls the kubelet makes every 2 s.
func deployments(ns string, pods int) []*appsv1.Deployment {
	probed := max(pods/10, 1)
	return []*appsv1.Deployment{
		deployment(ns, "plain", pods-probed, nil),
		deployment(ns, "probed", probed, &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
			PeriodSeconds: 2,
		}),
	}
}

func deployment(ns, name string, replicas int, probe *corev1.Probe) *appsv1.Deployment {
	labels := map[string]string{"app": benchLabel, "deployment": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			// Churn replaces pods at once: no rolling update is involved.
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(1)),
					EnableServiceLinks:            ptr.To(false),
					AutomountServiceAccountToken:  ptr.To(false),
					Containers: []corev1.Container{{
						Name:            "app",
						Image:           busybox,
						ImagePullPolicy: corev1.PullIfNotPresent,
						// A shell that ends on SIGTERM, so that churn is not the grace period.
						Command:        []string{"sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"},
						ReadinessProbe: probe,
					}},
				},
			},
		},
	}
}

// waitReady waits until the namespace's bench pods number want, all Ready.
func waitReady(ctx context.Context, cs kubernetes.Interface, ns string, want int, changed <-chan struct{}) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + benchLabel})
		if err != nil {
			return fmt.Errorf("list pods: %w", err)
		}
		ready := 0
		for i := range pods.Items {
			if pods.Items[i].DeletionTimestamp == nil && podReady(&pods.Items[i]) {
				ready++
			}
		}
		if ready == want && len(pods.Items) == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d pods Ready (%d pods): %w", ready, want, len(pods.Items), ctx.Err())
		case <-changed:
		case <-tick.C: // pods going away signal nothing
		}
	}
}

// churn deletes a tenth of the pods, at random, and waits until their replacements are Ready.
func churn(ctx context.Context, cs kubernetes.Interface, ns string, want int, changed <-chan struct{}) error {
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + benchLabel})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	rand.Shuffle(len(pods.Items), func(i, j int) { pods.Items[i], pods.Items[j] = pods.Items[j], pods.Items[i] })
	for _, p := range pods.Items[:max(len(pods.Items)/10, 1)] {
		if err := cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("delete pod %s: %w", p.Name, err)
		}
	}
	return waitReady(ctx, cs, ns, want, changed)
}

// waitGone waits until the namespace is deleted, pods and all.
func waitGone(ctx context.Context, cs kubernetes.Interface, ns string) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s still there: %w", ns, ctx.Err())
		case <-tick.C:
		}
	}
}
