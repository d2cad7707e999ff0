package nodeinstall

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// KubeNode is Cluster for one Node through the API server.
type KubeNode struct {
	Client kubernetes.Interface
	Name   string
}

// SetTaint adds or removes TaintKey (NoSchedule): while the kubelet is switched, no new pod
// is scheduled to the node; the pods on it run on.
func (k KubeNode) SetTaint(ctx context.Context, on bool) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := k.Client.CoreV1().Nodes().Get(ctx, k.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var taints []corev1.Taint
		had := false
		for _, t := range n.Spec.Taints {
			if t.Key == TaintKey {
				had = true
				continue
			}
			taints = append(taints, t)
		}
		if had == on {
			return nil
		}
		if on {
			taints = append(taints, corev1.Taint{Key: TaintKey, Value: "true", Effect: corev1.TaintEffectNoSchedule})
		}
		n.Spec.Taints = taints
		_, err = k.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("node %s: taint %s=%v: %w", k.Name, TaintKey, on, err)
	}
	return nil
}

// SetLabel adds or removes LabelKey=LabelInstalled.
func (k KubeNode) SetLabel(ctx context.Context, on bool) error {
	var v any // null removes the label in a merge patch
	if on {
		v = LabelInstalled
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{LabelKey: v}}})
	if err != nil {
		return err
	}
	if _, err := k.Client.CoreV1().Nodes().Patch(ctx, k.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("node %s: label %s: %w", k.Name, LabelKey, err)
	}
	return nil
}

// Labelled reports whether the node has LabelKey=LabelInstalled.
func (k KubeNode) Labelled(ctx context.Context) (bool, error) {
	n, err := k.Client.CoreV1().Nodes().Get(ctx, k.Name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("node %s: %w", k.Name, err)
	}
	return n.Labels[LabelKey] == LabelInstalled, nil
}

// WaitReady polls the node until Ready is True with a heartbeat at or after since (the
// kubelet and the installer share the node's clock).
func (k KubeNode) WaitReady(ctx context.Context, since time.Time) error {
	var last string
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := k.Client.CoreV1().Nodes().Get(ctx, k.Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil // the API server may be briefly away; the context bounds it
		}
		ok, why := nodeReadySince(n, since)
		last = why
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready again: %s: %w", k.Name, last, err)
	}
	return nil
}

// nodeReadySince reports whether n is Ready with a heartbeat at or after since, and if not why.
func nodeReadySince(n *corev1.Node, since time.Time) (bool, string) {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status != corev1.ConditionTrue {
			return false, fmt.Sprintf("Ready=%s (%s: %s)", c.Status, c.Reason, c.Message)
		}
		if c.LastHeartbeatTime.Time.Before(since) {
			return false, fmt.Sprintf("Ready, but last reported %s, before the kubelet's restart at %s", c.LastHeartbeatTime.UTC().Format(time.RFC3339), since.UTC().Format(time.RFC3339))
		}
		return true, ""
	}
	return false, "no Ready condition"
}
