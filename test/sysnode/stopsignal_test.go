package sysnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/crishim/crishim/test/node"
)

// TestStopSignal: a pod whose container declares lifecycle.stopSignal SIGUSR1 (CRI
// stop_signal; the apiserver and the node's kubelet run with ContainerStopSignals=true) gets
// SIGUSR1, not SIGTERM, when it is deleted. The container traps both into a file on the node.
func TestStopSignal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const dir = "/var/tmp/sysnode-stopsignal"
	if out, err := testNode.NodeExec(ctx, "rm", "-rf", dir); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	trap := `trap "echo USR1 > /out/signal; exit 0" USR1; trap "echo TERM > /out/signal; exit 0" TERM; while :; do sleep 1 & wait $!; done`
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: sysnode-stopsignal
spec:
  os:
    name: linux
  terminationGracePeriodSeconds: 20
  volumes:
  - name: out
    hostPath:
      path: %s
      type: DirectoryOrCreate
  containers:
  - name: app
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", %q]
    volumeMounts:
    - name: out
      mountPath: /out
    lifecycle:
      stopSignal: SIGUSR1
`, dir, node.BusyboxLatest, trap)
	runPod(ctx, t, "sysnode-stopsignal", pod)
	out, err := testNode.Kubectl(ctx, nil, "get", "pod", "sysnode-stopsignal", "-o", "jsonpath={.spec.containers[0].lifecycle.stopSignal}")
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != "SIGUSR1" {
		t.Skipf("the apiserver dropped lifecycle.stopSignal (%q): the ContainerStopSignals gate is off", out)
	}
	if _, err := testNode.Kubectl(ctx, nil, "delete", "pod", "sysnode-stopsignal", "--wait=true", "--timeout=60s"); err != nil {
		t.Fatal(err)
	}
	got, err := testNode.NodeExec(ctx, "cat", dir+"/signal")
	if err != nil {
		t.Fatalf("the container recorded no signal: %v %s", err, got)
	}
	if s := strings.TrimSpace(string(got)); s != "USR1" {
		t.Errorf("the container with stopSignal SIGUSR1 got %s on delete, want USR1", s)
	}
}
