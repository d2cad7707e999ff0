package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/crishim/crishim/test/crishimproc"
	"github.com/crishim/crishim/test/harness"
)

// walk drives crishim with the kubelet's own CRI client, printing each step.
func walk(ctx context.Context, ctlBin string, d *crishimproc.Process, cd *harness.Containerd) error {
	endpoint := d.Endpoint
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(time.Minute).Build(ctx)
	if err != nil {
		return err
	}
	defer rs.Close(ctx)

	say("crishimctl status")
	out, err := exec.CommandContext(ctx, ctlBin, "--endpoint", endpoint, "status").CombinedOutput()
	fmt.Print(indent(string(out)))
	if err != nil {
		return fmt.Errorf("crishimctl status: %w", err)
	}

	say("CRI Version through crishim (what the kubelet asks first)")
	v, err := rs.Version(ctx, "v1")
	if err != nil {
		return err
	}
	detail("runtime %s %s, CRI %s", v.RuntimeName, v.RuntimeVersion, v.RuntimeApiVersion)

	say("RunPodSandbox: a pod with CNI networking on the private bridge")
	logDir, err := os.MkdirTemp(cd.PodsDir, "demo-")
	if err != nil {
		return err
	}
	pod := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "demo", Namespace: "default", Uid: fmt.Sprint(time.Now().UnixNano())},
		Hostname:     "demo",
		LogDirectory: logDir,
		Labels:       map[string]string{"app": "demo"},
		// As the kubelet asks for a pod without shareProcessNamespace.
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	podID, err := rs.RunPodSandbox(ctx, pod, "")
	if err != nil {
		return err
	}
	ps, err := rs.PodSandboxStatus(ctx, podID, false)
	if err != nil {
		return err
	}
	detail("pod %s ready, IP %s", short(podID), ps.Status.GetNetwork().GetIp())

	say("CreateContainer + StartContainer: busybox running sleep")
	ctr := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: cd.BusyboxImage},
		Command:  []string{"/bin/sh", "-c", "echo app started; exec sleep 3600"},
		LogPath:  "app.log",
		Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	ctrID, err := runContainer(ctx, rs, podID, ctr, pod)
	if err != nil {
		return err
	}
	cs, err := rs.ContainerStatus(ctx, ctrID, false)
	if err != nil {
		return err
	}
	detail("container %s %s", short(ctrID), cs.Status.State)

	say("ExecSync in the container")
	stdout, stderr, err := rs.ExecSync(ctx, ctrID, []string{"sh", "-c", "echo hello from $(hostname); ps"}, 10*time.Second)
	if err != nil {
		return err
	}
	fmt.Print(indent(string(stdout) + string(stderr)))
	if err := showTarget(ctx, ctlBin, endpoint, ctrID); err != nil {
		return err
	}
	if err := showStreaming(ctx, ctlBin, d, cd, rs, pod, podID, ctrID); err != nil {
		return err
	}

	say("ListPodSandbox and ListContainers through crishim")
	pods, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "demo"}})
	if err != nil {
		return err
	}
	for _, p := range pods {
		detail("pod       %s  %-8s %s", short(p.Id), p.Metadata.Name, p.State)
	}
	ctrs, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: podID})
	if err != nil {
		return err
	}
	for _, c := range ctrs {
		detail("container %s  %-8s %s", short(c.Id), c.Metadata.Name, c.State)
	}

	say("A method crishim's CRI does not know is still relayed (the runtime answers, not crishim)")
	if err := unknownMethod(ctx, d.Endpoint); err != nil {
		return err
	}

	if err := showSignals(ctx, ctlBin, d, rs, cd); err != nil {
		return err
	}

	say("crishim's metrics (http://%s/metrics)", d.Metrics)
	if err := printMetrics(ctx, d.Metrics, func(line string) bool {
		return strings.HasPrefix(line, "crishim_grpc_requests_total{")
	}); err != nil {
		return err
	}
	return nil
}

func unknownMethod(ctx context.Context, endpoint string) error {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	const method = "/runtime.v1.RuntimeService/MethodFromTheFuture"
	err = conn.Invoke(ctx, method, &runtimeapi.VersionRequest{}, &runtimeapi.VersionResponse{})
	st := status.Convert(err)
	detail("%s -> %s: %s", method, st.Code(), st.Message())
	return nil
}

// printMetrics prints the lines of crishim's /metrics that keep selects.
func printMetrics(ctx context.Context, addr string, keep func(line string) bool) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if keep(sc.Text()) {
			detail("%s", sc.Text())
		}
	}
	return sc.Err()
}

// runContainer creates a container in the pod and starts it.
func runContainer(ctx context.Context, rs internalapi.RuntimeService, podID string, cfg *runtimeapi.ContainerConfig, pod *runtimeapi.PodSandboxConfig) (string, error) {
	id, err := rs.CreateContainer(ctx, podID, cfg, pod)
	if err != nil {
		return "", err
	}
	if err := rs.StartContainer(ctx, id); err != nil {
		return "", err
	}
	return id, nil
}

func short(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "    " + strings.ReplaceAll(s, "\n", "\n    ") + "\n"
}
