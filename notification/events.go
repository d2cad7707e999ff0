package notification

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"

	"github.com/crishim/crishim/metrics"
	"github.com/crishim/crishim/notification/v1alpha1"
)

// eventsResource is core/v1 Events, written through the dynamic client for the same reason
// as the informer: a typed client would link API groups crishim never uses.
var eventsResource = corev1.SchemeGroupVersion.WithResource("events")

// scheme lets the event recorder name a Notification in an Event's involvedObject.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(v1alpha1.SchemeGroupVersion, &v1alpha1.Notification{}, &v1alpha1.NotificationList{})
	return s
}()

// eventSource is who an Event says reported it: crishim on this node.
func eventSource(node string) corev1.EventSource {
	return corev1.EventSource{Component: "crishim", Host: node}
}

// eventSink stores the broadcaster's Events through the dynamic client: record.EventSink
// over what typedcorev1.EventSinkImpl does with a typed client. Failures are counted here;
// the broadcaster retries or drops and logs them itself.
type eventSink struct {
	ctx     context.Context // the controller's: no write outlives it
	events  dynamic.NamespaceableResourceInterface
	metrics *metrics.Notifications
}

var _ record.EventSink = (*eventSink)(nil)

func (s *eventSink) Create(ev *corev1.Event) (*corev1.Event, error) {
	u, err := toUnstructured(ev)
	if err != nil {
		return nil, err
	}
	return s.result(s.events.Namespace(ev.Namespace).Create(s.ctx, u, metav1.CreateOptions{}))
}

func (s *eventSink) Update(ev *corev1.Event) (*corev1.Event, error) {
	u, err := toUnstructured(ev)
	if err != nil {
		return nil, err
	}
	return s.result(s.events.Namespace(ev.Namespace).Update(s.ctx, u, metav1.UpdateOptions{}))
}

// Patch is how the broadcaster counts a repeated Event (count, lastTimestamp) instead of
// creating another: a strategic merge patch, as the typed sink sends.
func (s *eventSink) Patch(ev *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.result(s.events.Namespace(ev.Namespace).Patch(s.ctx, ev.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{}))
}

func (s *eventSink) result(u *unstructured.Unstructured, err error) (*corev1.Event, error) {
	if err != nil {
		s.metrics.APIError("event")
		return nil, err
	}
	var ev corev1.Event
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ev); err != nil {
		return nil, fmt.Errorf("decode event %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &ev, nil
}

func toUnstructured(ev *corev1.Event) (*unstructured.Unstructured, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ev)
	if err != nil {
		return nil, fmt.Errorf("encode event: %w", err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion("v1")
	u.SetKind("Event")
	return u, nil
}
