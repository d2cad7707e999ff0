package notification

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/notification/v1alpha1"
)

func TestSelectedPods(t *testing.T) {
	created := time.Unix(5000, 0)
	n := &v1alpha1.Notification{
		ObjectMeta: metav1.ObjectMeta{Namespace: "db", CreationTimestamp: metav1.NewTime(created)},
		Spec: v1alpha1.NotificationSpec{ContainerNotifierName: "quiesce", PodSelector: metav1.LabelSelector{
			MatchLabels:      map[string]string{"app": "db"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"cache"}}},
		}},
	}
	pod := func(name, ns string, labels map[string]string, ann string, at time.Time, ready bool) *runtimeapi.PodSandbox {
		st := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		if ready {
			st = runtimeapi.PodSandboxState_SANDBOX_READY
		}
		return &runtimeapi.PodSandbox{Id: name, Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: ns, Uid: name},
			Labels: labels, Annotations: map[string]string{ann: "{}"}, CreatedAt: at.UnixNano(), State: st}
	}
	db := map[string]string{"app": "db"}
	decl := "notifier.crishim.io/main.quiesce"
	pods := []*runtimeapi.PodSandbox{
		pod("selected", "db", db, decl, created.Add(-time.Minute), true),
		pod("same-second", "db", db, decl, created.Add(500*time.Millisecond), true),
		pod("later", "db", db, decl, created.Add(time.Second), true),
		pod("other-ns", "web", db, decl, created.Add(-time.Minute), true),
		pod("not-ready", "db", db, decl, created.Add(-time.Minute), false),
		pod("cache", "db", map[string]string{"app": "db", "tier": "cache"}, decl, created.Add(-time.Minute), true),
		pod("other-notifier", "db", db, "notifier.crishim.io/main.reload", created.Add(-time.Minute), true),
		pod("suffix-lookalike", "db", db, "notifier.crishim.io/main.prequiesce", created.Add(-time.Minute), true),
	}
	got, err := selectedPods(n, pods)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, p.GetId())
	}
	if len(names) != 2 || names[0] != "selected" || names[1] != "same-second" {
		t.Errorf("selected %v, want [selected same-second]", names)
	}

	n.Spec.PodSelector.MatchExpressions[0].Operator = "Sometimes"
	if _, err := selectedPods(n, pods); err == nil {
		t.Error("a bad selector operator was accepted")
	}
}
