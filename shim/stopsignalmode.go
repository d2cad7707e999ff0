package shim

import (
	"context"
	"fmt"

	"github.com/crishim/crishim/shim/crishimv1"
)

// --stop-signal-mode values, and the effective mode "pass-through": the
// runtime ignores stop_signal and crishim cannot emulate it, so the request
// goes on as it is (the runtime's own behaviour, now logged and counted).
const (
	StopSignalAuto        = ModeAuto
	StopSignalNative      = ModeNative
	StopSignalEmulate     = ModeEmulate
	stopSignalPassThrough = "pass-through"
)

// decideStop says how stop_signal is provided right now, and why. Like
// TARGET, auto asks the runtime each time: it may be upgraded while crishim
// runs. Emulation needs the containerd API, which both delivers the signal
// and keeps the record that a retried stop must not deliver it again.
func (g *signalling) decideStop(ctx context.Context) (mode, reason string, err error) {
	switch g.configured {
	case StopSignalNative:
		return StopSignalNative, "configured: stop_signal is passed to the runtime", nil
	case StopSignalEmulate:
		if g.ctrd == nil {
			return stopSignalPassThrough, "configured to emulate, but --containerd-address is empty", nil
		}
		return StopSignalEmulate, fmt.Sprintf("configured: delivered at StopContainer through the containerd API at %s", g.ctrd.address), nil
	}
	v, err := runtimeVersion(ctx, g.rs, "stop_signal")
	if err != nil {
		return "", "", err
	}
	known, why := honoursStopSignal.lookup("stop_signal", v.GetRuntimeName(), v.GetRuntimeVersion())
	if known == supportHonours {
		return StopSignalNative, why, nil
	}
	if g.ctrd == nil {
		return stopSignalPassThrough, why + ", and crishim cannot emulate it without the containerd API (--containerd-address is empty)", nil
	}
	if err := g.ctrd.reachable(ctx); err != nil {
		return stopSignalPassThrough, fmt.Sprintf("%s, and crishim cannot emulate it: %v", why, err), nil
	}
	return StopSignalEmulate, fmt.Sprintf("%s; emulated at StopContainer through the containerd API at %s", why, g.ctrd.address), nil
}

// statusMode is the stop-signal line of crishim.v1 Status.
func (g *signalling) statusMode(ctx context.Context) *crishimv1.Mode {
	m := &crishimv1.Mode{Feature: "stop-signal", Configured: g.configured}
	mode, reason, err := g.decideStop(ctx)
	if err != nil {
		m.Effective, m.Reason = "unknown", err.Error()
		return m
	}
	m.Effective, m.Reason = mode, reason
	return m
}
