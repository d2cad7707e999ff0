package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

// TestContainerEventsThroughCrishim: the kubelet's event stream (a
// server-streaming call) is relayed while it stays open. A runtime without
// events (containerd before 1.7) must give the kubelet its own answer.
func TestContainerEventsThroughCrishim(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	rs, _ := criClients(t, d.Endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	direct := eventsAnswer(ctx, t, testbed.Endpoint)
	if status.Code(direct) == codes.Unimplemented {
		proxied := eventsAnswer(ctx, t, d.Endpoint)
		if status.Code(proxied) != codes.Unimplemented || status.Convert(proxied).Message() != status.Convert(direct).Message() {
			t.Fatalf("runtime without events: direct %v, through crishim %v", direct, proxied)
		}
		t.Logf("runtime has no container events (%v); crishim relays that answer unchanged", direct)
		return
	}

	events := make(chan *runtimeapi.ContainerEventResponse, 100)
	established := make(chan struct{})
	streamErr := make(chan error, 1)
	go func() {
		streamErr <- rs.GetContainerEvents(ctx, events, func(runtimeapi.RuntimeService_GetContainerEventsClient) { close(established) })
	}()
	select {
	case <-established:
	case err := <-streamErr:
		t.Fatalf("GetContainerEvents: %v", err)
	}

	name := uniqueName("events")
	podCfg := podConfig(t, name, nil)
	podID := runPod(t, rs, podCfg)
	ctrID := startContainer(t, rs, podID, podCfg, containerConfig("evented", "exec sleep 3600", nil))
	want := map[runtimeapi.ContainerEventType]bool{
		runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT: false,
		runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT: false,
	}
	for !want[runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT] || !want[runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT] {
		select {
		case ev := <-events:
			if ev.ContainerId == ctrID {
				want[ev.ContainerEventType] = true
			}
		case err := <-streamErr:
			t.Fatalf("event stream ended: %v", err)
		case <-ctx.Done():
			t.Fatalf("events seen for %s: %v", ctrID, want)
		}
	}
}

// TestStreamingListFallsBackThroughCrishim: a kubelet with CRI list
// streaming on calls Stream* methods; containerd 1.6 answers Unimplemented
// through crishim's stream relay and the client falls back to the unary list.
func TestStreamingListFallsBackThroughCrishim(t *testing.T) {
	d := startCrishim(t, testbed.Endpoint)
	ctx := context.Background()
	rs, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(d.Endpoint).WithConnectionTimeout(time.Minute).WithUseStreaming(true).Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close(ctx) }) // after the pod's cleanup, which needs it
	name := uniqueName("streamlist")
	podCfg := podConfig(t, name, map[string]string{"run": name})
	podID := runPod(t, rs, podCfg)
	for range 2 { // the first call discovers Unimplemented, the second uses the fallback
		pods, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"run": name}})
		if err != nil || len(pods) != 1 || pods[0].Id != podID {
			t.Fatalf("ListPodSandbox with streaming client = %v, %v", pods, err)
		}
	}
}

// eventsAnswer opens the event stream at endpoint and returns how the first
// receive ends: nil if an event or nothing arrives within a moment.
func eventsAnswer(ctx context.Context, t *testing.T, endpoint string) error {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	stream, err := runtimeapi.NewRuntimeServiceClient(conn).GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		return err
	}
	_, err = stream.Recv()
	if status.Code(err) == codes.DeadlineExceeded {
		return nil
	}
	return err
}
