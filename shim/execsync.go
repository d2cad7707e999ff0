package shim

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/caller"
	"github.com/crishim/crishim/proxy"
)

// execSyncMethods intercepts ExecSync only while it is audited
// (--audit-exec-sync, which reloads): the kubelet's exec probes call it every
// few seconds per probe, and pass through untouched otherwise. With no audit
// log there is nothing to reload into.
func (s *Shim) execSyncMethods() []proxy.Method {
	if s.opts.Audit == nil {
		return nil
	}
	return []proxy.Method{proxy.Unary(runtimeapi.RuntimeService_ExecSync_FullMethodName, s.execSync).When(s.opts.Audit.ExecSync)}
}

func (s *Shim) execSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	if !s.opts.Audit.ExecSync() {
		// A reload turned the audit off after the relay routed the call
		// here: pass it on as the relay would have.
		return s.runtimeClient().ExecSync(toRuntime(ctx), req)
	}
	ev := audit.Event{Kind: audit.KindExecSync, ContainerID: req.GetContainerId(), Argv: req.GetCmd()}
	if st, err := s.runtimeClient().ContainerStatus(toRuntime(ctx), &runtimeapi.ContainerStatusRequest{ContainerId: req.GetContainerId()}); err == nil {
		ev = auditWho(st.GetStatus())
		ev.Kind, ev.Argv = audit.KindExecSync, req.GetCmd()
	}
	ev.Caller = caller.FromContext(ctx)
	sess := s.opts.Audit.Start(ev)
	if err := sess.Refused(); err != nil {
		return nil, auditRefused(err)
	}
	resp, err := s.runtimeClient().ExecSync(toRuntime(ctx), req)
	sess.End(func(ev *audit.Event) {
		auditEnd(err)(ev)
		if err == nil {
			ev.ExitCode = audit.Ptr(resp.GetExitCode())
		}
	})
	return resp, err
}
