package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/crishim/crishim/audit"
)

// auditConfig holds the audit log flags, named as kube-apiserver's.
type auditConfig struct{ audit.Config }

func (c *auditConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.Path, "audit-log", "", "file for the audit log (JSON lines, mode 0600; - for stdout): every exec, attach, port-forward, debug container, Signal and Notify; empty disables")
	fs.IntVar(&c.MaxSizeMB, "audit-log-maxsize", 100, "rotate the audit log when it reaches this many megabytes (0: never)")
	fs.IntVar(&c.MaxBackups, "audit-log-maxbackup", 10, "rotated audit log files to keep (0: all)")
	fs.IntVar(&c.MaxAgeDays, "audit-log-maxage", 0, "days to keep rotated audit log files (0: no limit)")
	fs.BoolVar(&c.Required, "audit-required", false, "refuse new sessions (exec, attach, port-forward, debug containers, signal, notify, audited exec sync) and fail /readyz while audit events cannot be written")
	fs.BoolVar(&c.ExecSync, "audit-exec-sync", false, "audit ExecSync calls too (the kubelet's exec probes make many)")
	fs.StringVar(&c.CRICalls, "audit-cri-calls", audit.CRICallsMutating, "which CRI and crishim.v1 calls of callers other than the kubelet are audited (kind criCall, with the caller): "+strings.Join(audit.CRICallsLevels, "|")+"; the kubelet's never are")
	checkValue(fs, "audit-cri-calls", oneOf(audit.CRICallsLevels...))
	for _, name := range []string{"audit-log-maxsize", "audit-log-maxbackup", "audit-log-maxage"} {
		checkValue(fs, name, nonNegative)
	}
}

// auditReload: the log reads these per event (rotation size, whether a
// failed write refuses the session) or per call (ExecSync's interception).
var auditReload = reload{
	keys: []string{"audit-exec-sync", "audit-required", "audit-log-maxsize"},
	apply: func(r *reloader, cfg *config) {
		if r.audit != nil {
			r.audit.Reconfigure(cfg.audit.Config)
		}
	},
}

func (c *auditConfig) finish() error {
	if c.Path == "" && (c.Required || c.ExecSync) {
		return fmt.Errorf("--audit-required and --audit-exec-sync need --audit-log")
	}
	return nil
}

// withAudit adds the audit log to readiness when it is required.
func withAudit(ready func(context.Context) error, l *audit.Log) func(context.Context) error {
	if l == nil {
		return ready
	}
	return func(ctx context.Context) error {
		if err := l.Ready(ctx); err != nil {
			return err
		}
		return ready(ctx)
	}
}
