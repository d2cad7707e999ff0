package nodeinstall

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestNodeReadySince: Ready counts only when reported at or after the kubelet's restart; the
// Ready the API server still shows from the kubelet before it does not.
func TestNodeReadySince(t *testing.T) {
	restart := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	node := func(status corev1.ConditionStatus, beat time.Time) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.NewTime(beat)},
		}}}
	}
	for _, tc := range []struct {
		name string
		n    *corev1.Node
		want bool
	}{
		{"ready after", node(corev1.ConditionTrue, restart.Add(time.Second)), true},
		{"ready at", node(corev1.ConditionTrue, restart), true},
		{"ready before the restart", node(corev1.ConditionTrue, restart.Add(-time.Second)), false},
		{"not ready after", node(corev1.ConditionFalse, restart.Add(time.Second)), false},
		{"no condition", &corev1.Node{}, false},
	} {
		if got, why := nodeReadySince(tc.n, restart); got != tc.want {
			t.Errorf("%s: %v (%s), want %v", tc.name, got, why, tc.want)
		}
	}
}

// TestKubeNodeTaintAndLabel: the taint is added once and removed leaving the others; the
// label is set and removed.
func TestKubeNodeTaintAndLabel(t *testing.T) {
	ctx := context.Background()
	other := corev1.Taint{Key: "example.com/other", Effect: corev1.TaintEffectNoExecute}
	cs := fake.NewClientset(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"keep": "me"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{other}},
	})
	k := KubeNode{Client: cs, Name: "n1"}
	get := func() *corev1.Node {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for range 2 {
		if err := k.SetTaint(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	if ts := get().Spec.Taints; len(ts) != 2 || ts[1].Key != TaintKey || ts[1].Effect != corev1.TaintEffectNoSchedule {
		t.Errorf("taints %v, want the other and one %s:NoSchedule", ts, TaintKey)
	}
	if err := k.SetTaint(ctx, false); err != nil {
		t.Fatal(err)
	}
	if ts := get().Spec.Taints; len(ts) != 1 || ts[0].Key != other.Key {
		t.Errorf("taints %v, want the other only", ts)
	}
	if err := k.SetLabel(ctx, true); err != nil {
		t.Fatal(err)
	}
	if ok, err := k.Labelled(ctx); err != nil || !ok {
		t.Errorf("Labelled = %v, %v", ok, err)
	}
	if err := k.SetLabel(ctx, false); err != nil {
		t.Fatal(err)
	}
	if l := get().Labels; l[LabelKey] != "" || l["keep"] != "me" {
		t.Errorf("labels %v, want %s gone and the others kept", l, LabelKey)
	}
}
