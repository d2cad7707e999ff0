package shim

import (
	"context"
	"fmt"

	"github.com/crishim/crishim/shim/crishimv1"
)

// --pid-target-mode values (see modes.go), and the effective mode "reject".
const (
	PIDTargetAuto    = ModeAuto
	PIDTargetNative  = ModeNative
	PIDTargetEmulate = ModeEmulate
	pidTargetReject  = "reject"
)

// decide says how TARGET is provided right now: native, emulate or reject,
// and why. auto asks the runtime each time rather than once at start: the
// runtime behind crishim can be upgraded while crishim runs, and TARGET
// requests are rare.
func (p *pidTarget) decide(ctx context.Context) (mode, reason string, err error) {
	switch p.configured {
	case PIDTargetNative:
		return PIDTargetNative, "configured: TARGET is passed to the runtime and verified after start", nil
	case PIDTargetEmulate:
		if p.ctrd == nil {
			return pidTargetReject, "configured to emulate, but --containerd-address is empty", nil
		}
		return PIDTargetEmulate, fmt.Sprintf("configured: joined through the containerd API at %s and verified after start", p.ctrd.address), nil
	}
	v, err := runtimeVersion(ctx, p.rs, "TARGET")
	if err != nil {
		return "", "", err
	}
	known, why := honoursTarget.lookup("TARGET", v.GetRuntimeName(), v.GetRuntimeVersion())
	switch known {
	case supportHonours:
		return PIDTargetNative, why, nil
	case supportUnknown:
		// Whether a runtime honours TARGET shows in what it does: given
		// TARGET, the container either shares its target's PID namespace
		// after start or is stopped and refused (verify). Emulating instead
		// would take the join away from a runtime that does it right (CRI-O).
		return PIDTargetNative, v.GetRuntimeName() + " " + v.GetRuntimeVersion() + " is not known to ignore TARGET: it is passed to the runtime and verified after start", nil
	}
	if p.ctrd == nil {
		return pidTargetReject, why + ", and the containerd API is disabled (--containerd-address is empty)", nil
	}
	if err := p.ctrd.reachable(ctx); err != nil {
		return pidTargetReject, fmt.Sprintf("%s, and crishim cannot emulate it: %v", why, err), nil
	}
	return PIDTargetEmulate, fmt.Sprintf("%s; emulated through the containerd API at %s", why, p.ctrd.address), nil
}

// statusMode is the pid-target line of crishim.v1 Status.
func (p *pidTarget) statusMode(ctx context.Context) *crishimv1.Mode {
	m := &crishimv1.Mode{Feature: "pid-target", Configured: p.configured}
	mode, reason, err := p.decide(ctx)
	if err != nil {
		m.Effective, m.Reason = "unknown", err.Error()
		return m
	}
	m.Effective, m.Reason = mode, reason
	return m
}
