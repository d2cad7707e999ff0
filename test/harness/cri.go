package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// dialCRI returns a gRPC client connection to a unix socket. grpc.NewClient does not
// connect until the first call, so this never blocks. The reconnect backoff is cut from
// gRPC's default 1s base: waiting for a just-started containerd otherwise costs a second
// after the first dial finds no socket yet, and a local socket needs no politeness.
func dialCRI(socket string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: 2 * time.Second,
		}))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", socket, err)
	}
	return conn, nil
}

// poll calls f until it succeeds, ctx ends, timeout passes or f fails with one of the fatal
// errors, and returns f's last error on failure since that says more than "deadline exceeded".
func poll(ctx context.Context, timeout time.Duration, f func(context.Context) error, fatal ...error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	delay := 20 * time.Millisecond
	for {
		callCtx, callCancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(callCtx)
		callCancel()
		if err == nil {
			return nil
		}
		for _, target := range fatal {
			if errors.Is(err, target) {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up after %v: %w", timeout, err)
		case <-time.After(delay):
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// RequiredConditions are the CRI Status conditions that must be true for a runtime to be
// ready: the two the kubelet requires. Others are informational: containerd 2.x on cgroup
// v1 reports ContainerdHasNoDeprecationWarnings=false and runs pods all the same.
var RequiredConditions = []string{runtimeapi.RuntimeReady, runtimeapi.NetworkReady}

// Ready checks a CRI Status answer as the kubelet does: every RequiredConditions present
// and true, whatever the other conditions say.
func Ready(st *runtimeapi.RuntimeStatus) error {
	for _, want := range RequiredConditions {
		var found *runtimeapi.RuntimeCondition
		for _, c := range st.GetConditions() {
			if c.GetType() == want {
				found = c
			}
		}
		if found == nil {
			return fmt.Errorf("CRI condition %s missing from Status", want)
		}
		if !found.GetStatus() {
			return fmt.Errorf("CRI condition %s not ready: %s %s", want, found.GetReason(), found.GetMessage())
		}
	}
	return nil
}

// criReady reports nil once the runtime answers Version and says that both the runtime and
// the network (the CNI config has been loaded) are ready, i.e. a pod can be run.
func criReady(ctx context.Context, rt runtimeapi.RuntimeServiceClient) error {
	if _, err := rt.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		return fmt.Errorf("CRI Version: %w", err)
	}
	st, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return fmt.Errorf("CRI Status: %w", err)
	}
	return Ready(st.GetStatus())
}

// removeAllPods stops and removes every pod sandbox (and so every container) through CRI.
// Going through CRI rather than killing processes lets containerd run the CNI DEL, which
// removes veths and IPAM allocations, and unmount the pod's netns and shm.
func removeAllPods(ctx context.Context, socket string) error {
	conn, err := dialCRI(socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	pods, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("list pod sandboxes: %w", err)
	}
	var errs []error
	for _, p := range pods.GetItems() {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("stop pod sandbox %s: %w", p.GetId(), err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("remove pod sandbox %s: %w", p.GetId(), err))
		}
	}
	return errors.Join(errs...)
}

// runtimeVersion is the cheapest CRI call, used to tell whether containerd answers.
func runtimeVersion(ctx context.Context, conn grpc.ClientConnInterface) (*runtimeapi.VersionResponse, error) {
	return runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
}
