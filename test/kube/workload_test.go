package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestDeploymentThroughCrishim: a Deployment's pods run through crishim, `kubectl logs`
// reads them, a crashing container is restarted, and deleting the Deployment leaves no
// container running in the runtime.
func TestDeploymentThroughCrishim(t *testing.T) {
	name := uniqueName("deploy")
	apply(t, fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: 2
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: web
        image: %[2]s
        imagePullPolicy: IfNotPresent
        command: ["sh", "-c", "echo hello from $HOSTNAME; exec httpd -f -p 8080 -h /etc"]
`, name, busybox))
	kubectl(t, "rollout", "status", "deployment/"+name, "--timeout=120s")
	if out := kubectl(t, "logs", "deployment/"+name, "-c", "web"); !strings.Contains(out, "hello from "+name) {
		t.Errorf("kubectl logs deployment/%s: %q, want the container's greeting", name, out)
	}
	pods := strings.Fields(kubectl(t, "get", "pods", "-l", "app="+name, "-o", "jsonpath={.items[*].metadata.name}"))
	if len(pods) != 2 {
		t.Fatalf("deployment %s runs pods %v, want 2", name, pods)
	}

	t.Run("crash restarts", func(t *testing.T) {
		crash := uniqueName("crash")
		apply(t, podManifest(crash, "", "", "crasher", "echo crash number $(date +%s%N); sleep 1; exit 3"))
		eventually(t, 3*time.Minute, func() error {
			p := getPod(t, crash)
			if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].RestartCount < 1 {
				return fmt.Errorf("pod %s not restarted yet: %+v", crash, p.Status.ContainerStatuses)
			}
			if term := p.Status.ContainerStatuses[0].LastTerminationState.Terminated; term == nil || term.ExitCode != 3 {
				return fmt.Errorf("pod %s last termination %+v, want exit code 3", crash, term)
			}
			return nil
		})
		// The kubelet may have collected the instance its status names as the last one
		// (kubelet 1.37 answered `unable to retrieve container logs for containerd://…`
		// once, a 200 with that text, in a CI run): the next crash makes another.
		eventually(t, time.Minute, func() error {
			out, stderr, code := kubectlEnv(t, nil, "", "logs", crash, "--previous")
			if code != 0 || !strings.Contains(out, "crash number") {
				return fmt.Errorf("kubectl logs --previous: exit %d, %q %s", code, out, stderr)
			}
			return nil
		})
	})

	t.Run("delete", func(t *testing.T) {
		kubectl(t, "delete", "deployment/"+name, "--wait=true", "--timeout=120s")
		eventually(t, 2*time.Minute, func() error {
			if out := kubectl(t, "get", "pods", "-l", "app="+name, "-o", "name"); strings.TrimSpace(out) != "" {
				return fmt.Errorf("pods left: %s", out)
			}
			return nil
		})
		// The pods are gone from the API; their containers must be stopped in the runtime too.
		eventually(t, time.Minute, func() error {
			running := runningContainers(t, map[string]string{"io.kubernetes.pod.namespace": "default"})
			for _, c := range running {
				for _, p := range pods {
					if c.GetLabels()["io.kubernetes.pod.name"] == p {
						return fmt.Errorf("container %s of deleted pod %s still running", c.GetId(), p)
					}
				}
			}
			return nil
		})
	})
}

// runningContainers lists the runtime's running containers with the given labels, asked
// through crishim as the kubelet would.
func runningContainers(t *testing.T, labels map[string]string) []*runtimeapi.Container {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+testNode.CrishimSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: labels,
	}})
	if err != nil {
		t.Fatalf("ListContainers through crishim: %v", err)
	}
	return resp.GetContainers()
}
