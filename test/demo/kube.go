package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/crishim/crishim/test/node"
)

// kubePod is the chapter's pod: an app whose processes a debug container will list.
const kubePod = `apiVersion: v1
kind: Pod
metadata:
  name: demo-app
  labels: {app: demo-app}
  annotations:
    notifier.crishim.io/app.quiesce: '{"exec":["sh","-c","echo quiesced at $(date) > /tmp/quiesced"]}'
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: docker.io/library/busybox:latest
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "echo demo app up; exec sleep 3600"]
`

// kubeNotification asks every node to run the pod's quiesce notifier.
const kubeNotification = `apiVersion: crishim.io/v1alpha2
kind: Notification
metadata:
  name: demo-quiesce
spec:
  containerNotifierName: quiesce
  podSelector:
    matchLabels: {app: demo-app}
`

// showKube is the kubectl chapter: a real kubelet and kube-apiserver with crishim as the
// kubelet's runtime (test/node), and the notification controller as a pod of the node. It
// reuses a node `make node` left running (index 0), and otherwise starts one and removes it
// at the end.
func showKube(ctx context.Context, crishimBin string, index int) error {
	say("A real Kubernetes node: kubelet -> crishim -> containerd, driven with kubectl")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	start := time.Now()
	n, err := node.Up(ctx, node.Options{Index: index, Crishim: crishimBin, Log: log})
	if err != nil {
		return err
	}
	detail("node %s Ready (Kubernetes %s) in %s; KUBECONFIG=%s", n.Name, n.Version, time.Since(start).Round(time.Second), n.Kubeconfig)
	k := func(stdin string, args ...string) (string, error) {
		var in []byte
		if stdin != "" {
			in = []byte(stdin)
		}
		out, err := n.Kubectl(ctx, in, args...)
		fmt.Print(indent(string(out)))
		return string(out), err
	}
	steps := []struct {
		title string
		stdin string
		args  []string
	}{
		{"kubectl get nodes -o wide", "", []string{"get", "nodes", "-o", "wide"}},
		{"kubectl apply a pod and wait for it", kubePod, []string{"apply", "-f", "-"}},
		{"", "", []string{"wait", "--for=condition=Ready", "pod/demo-app", "--timeout=120s"}},
		{"kubectl logs demo-app", "", []string{"logs", "demo-app"}},
		{"kubectl exec (the stream goes through crishim's streaming server)", "", []string{"exec", "demo-app", "--", "sh", "-c", "echo hello from $(hostname)"}},
		{"kubectl debug --target=app: a debug container in the app's PID namespace runs ps", "",
			[]string{"debug", "demo-app", "--image=docker.io/library/busybox:latest", "--image-pull-policy=IfNotPresent", "--target=app", "--container=debugger", "--", "sh", "-c", "ps; sleep 1"}},
		{"", "", []string{"wait", "--for=jsonpath={.status.ephemeralContainerStatuses[0].state.terminated.reason}=Completed", "pod/demo-app", "--timeout=60s"}},
		{"kubectl logs demo-app -c debugger: the app's sleep is PID 1 of the debug container's view", "", []string{"logs", "demo-app", "-c", "debugger"}},
		{"The notification controller, a pod of its own, fans Notifications out to the nodes and sums up", "", []string{"-n", "crishim-system", "get", "pods", "-o", "wide"}},
		{"A Notification (crishim.io/v1alpha2): every node runs the pods' quiesce notifier once", kubeNotification, []string{"apply", "-f", "-"}},
		{"", "", []string{"wait", "--for=condition=Succeeded", "notification/demo-quiesce", "--timeout=60s"}},
		{"", "", []string{"get", "notifications"}},
		{"Each node's share and its per-pod results", "", []string{"get", "nodenotifications", "-l", "crishim.io/notification=demo-quiesce"}},
		{"", "", []string{"get", "nodenotifications", "-l", "crishim.io/notification=demo-quiesce", "-o", "jsonpath={range .items[*].status.pods[*]}{.name} {.state} containers={.containers} succeeded={.succeeded}{\"\\n\"}{end}"}},
		{"", "", []string{"exec", "demo-app", "--", "cat", "/tmp/quiesced"}},
		{"", "", []string{"delete", "notification", "demo-quiesce"}},
		{"kubectl delete pod demo-app", "", []string{"delete", "pod", "demo-app", "--wait=true", "--timeout=60s"}},
	}
	for _, s := range steps {
		if s.title != "" {
			say("%s", s.title)
		}
		if _, err := k(s.stdin, s.args...); err != nil {
			return err
		}
	}
	say("crishim's stream metrics: the kubelet's exec sessions came through crishim")
	if err := printMetrics(ctx, strings.TrimPrefix(n.CrishimMetrics, "http://"), func(line string) bool {
		return strings.HasPrefix(line, "crishim_stream_sessions_total")
	}); err != nil {
		return err
	}
	if n.Reused {
		detail("the node was running before (make node): left running")
		return nil
	}
	say("Removing the node (make node keeps one running)")
	return n.Stop()
}
