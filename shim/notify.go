package shim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/caller"
	"github.com/crishim/crishim/shim/crishimv1"
)

// notifyParallel bounds the notifier runs of one Notify call in flight at
// once: a selector may match every pod of the node.
const notifyParallel = 16

// Notify runs a notifier in every selected pod's containers that declare
// it, and answers per pod and container.
func (a *api) Notify(ctx context.Context, req *crishimv1.NotifyRequest) (resp *crishimv1.NotifyResponse, err error) {
	// The pods are found before the started event, so that the event names
	// a pod by its full ID whatever prefix the client typed.
	pods, selectErr := a.notifyPods(ctx, req)
	ev := audit.Event{Kind: audit.KindNotify, Notifier: req.GetNotifier(), PodSandboxID: req.GetPodSandboxId(), Caller: caller.FromContext(ctx)}
	if ev.PodSandboxID != "" && len(pods) == 1 {
		ev.PodSandboxID = pods[0].GetId()
	}
	sess := a.shim.opts.Audit.Start(ev)
	if err := sess.Refused(); err != nil {
		return nil, auditRefused(err)
	}
	defer func() { sess.End(auditEnd(err)) }()
	if selectErr != nil {
		return nil, selectErr
	}
	g := a.shim.signals
	name := req.GetNotifier()
	var runs []notifierRun
	resp = &crishimv1.NotifyResponse{}
	for _, pod := range pods {
		decls := declarations(pod.GetAnnotations(), name)
		if len(decls) == 0 {
			continue
		}
		sort.Slice(decls, func(i, j int) bool { return decls[i].container < decls[j].container })
		ctrs, err := g.rs.ListContainers(toRuntime(ctx), &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: pod.GetId()}})
		if err != nil {
			st := status.Convert(err)
			return nil, status.Errorf(st.Code(), "crishim: containers of pod sandbox %s: %s", pod.GetId(), st.Message())
		}
		pn := &crishimv1.PodNotification{
			PodSandboxId: pod.GetId(),
			PodName:      pod.GetMetadata().GetName(),
			PodNamespace: pod.GetMetadata().GetNamespace(),
		}
		for _, d := range decls {
			cn := &crishimv1.ContainerNotification{ContainerName: d.container}
			pn.Containers = append(pn.Containers, cn)
			runs = append(runs, notifierRun{name: name, pod: pod, container: newest(ctrs.GetContainers(), d.container), decl: d, out: cn})
		}
		resp.Pods = append(resp.Pods, pn)
	}
	if len(runs) == 0 {
		return nil, status.Errorf(codes.NotFound, "notifier: no container of the %d selected pod(s) declares %q (pod annotation %s<container>.%s)",
			len(pods), name, NotifierAnnotationPrefix, name)
	}
	// The runs are this call's: all have ended when it returns.
	var wg sync.WaitGroup
	sem := make(chan struct{}, notifyParallel)
	for i := range runs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			g.runNotifier(ctx, &runs[i])
		}()
	}
	wg.Wait()
	return resp, nil
}

// notifyPods checks a Notify request and finds its pods.
func (a *api) notifyPods(ctx context.Context, req *crishimv1.NotifyRequest) ([]*runtimeapi.PodSandbox, error) {
	if req.GetNotifier() == "" {
		return nil, status.Error(codes.InvalidArgument, "notifier: empty; name the notifier to run")
	}
	if byID, bySelector := req.GetPodSandboxId() != "", len(req.GetLabelSelector()) > 0; byID == bySelector {
		return nil, status.Error(codes.InvalidArgument, "pod_sandbox_id, label_selector: give exactly one to select pods")
	}
	return a.shim.signals.selectPods(ctx, req)
}

// selectPods finds the pods of a Notify call: one by ID (or unique prefix),
// or the ready ones matching every label of the selector.
func (g *signalling) selectPods(ctx context.Context, req *crishimv1.NotifyRequest) ([]*runtimeapi.PodSandbox, error) {
	if id := req.GetPodSandboxId(); id != "" {
		resp, err := g.rs.ListPodSandbox(toRuntime(ctx), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: id}})
		if err != nil {
			st := status.Convert(err)
			return nil, status.Errorf(st.Code(), "crishim: looking up pod sandbox %q: %s", id, st.Message())
		}
		var prefixed []*runtimeapi.PodSandbox
		for _, p := range resp.GetItems() {
			if p.GetId() == id {
				return []*runtimeapi.PodSandbox{p}, nil
			}
			if strings.HasPrefix(p.GetId(), id) {
				prefixed = append(prefixed, p)
			}
		}
		if len(prefixed) == 1 {
			return prefixed, nil
		}
		return nil, status.Errorf(codes.NotFound, "pod_sandbox_id: pod sandbox %q not found", id)
	}
	sel := req.GetLabelSelector()
	resp, err := g.rs.ListPodSandbox(toRuntime(ctx), &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: sel,
		State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}})
	if err != nil {
		st := status.Convert(err)
		return nil, status.Errorf(st.Code(), "crishim: listing pod sandboxes: %s", st.Message())
	}
	if len(resp.GetItems()) == 0 {
		return nil, status.Errorf(codes.NotFound, "label_selector: no ready pod sandbox matches %s", formatSelector(sel))
	}
	pods := resp.GetItems()
	sort.Slice(pods, func(i, j int) bool {
		a, b := pods[i].GetMetadata(), pods[j].GetMetadata()
		if a.GetNamespace() != b.GetNamespace() {
			return a.GetNamespace() < b.GetNamespace()
		}
		return a.GetName() < b.GetName()
	})
	return pods, nil
}

// newest picks the container a notifier is about among those of a pod with
// its name: the running one, else the latest created (restarts leave the
// exited ones behind). nil when there is none.
func newest(ctrs []*runtimeapi.Container, name string) *runtimeapi.Container {
	var best *runtimeapi.Container
	for _, c := range ctrs {
		if c.GetMetadata().GetName() != name {
			continue
		}
		running := c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING
		bestRunning := best.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING
		switch {
		case best == nil, running && !bestRunning, running == bestRunning && c.GetCreatedAt() > best.GetCreatedAt():
			best = c
		}
	}
	return best
}

func formatSelector(sel map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		parts = append(parts, fmt.Sprintf("%s=%s", k, sel[k]))
	}
	return strings.Join(parts, ",")
}
