package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/crishim/crishim/allowlist"
	"github.com/crishim/crishim/audit"
	"github.com/crishim/crishim/cmd/crishim/internal/sdnotify"
	"github.com/crishim/crishim/cmd/internal/flagfile"
	"github.com/crishim/crishim/metrics"
)

// reloads is each feature's part of a reload: the keys it puts in force
// and how. A change of any other key is logged as needing a restart. The
// keys are those read per call or per event, not those that built a
// listener, a connection or a goroutine. One list: it marks the flags
// "(reloadable)" in --help and is what reload applies.
var reloads = []reload{logLevelReload, debugImagesReload, auditReload}

// reload is one feature's reloadable keys and what puts their new values
// in force (all of the feature's at once, changed or not).
type reload struct {
	keys  []string
	apply func(r *reloader, cfg *config)
}

// logLevelReload: the level is read per log line.
var logLevelReload = reload{
	keys:  []string{"log-level"},
	apply: func(r *reloader, cfg *config) { r.level.Set(cfg.logLevel) },
}

// reloadable says whether a reload puts key in force.
func reloadable(key string) bool {
	return slices.ContainsFunc(reloads, func(rl reload) bool { return slices.Contains(rl.keys, key) })
}

// auditLog is the audit log as a reload reaches it: its reloadable
// settings, and a reopen after rotation. *audit.Log is one; the tests see
// what a reload hands it. A nil auditLog is none.
type auditLog interface {
	Reconfigure(audit.Config)
	Reopen()
}

// reloadPoll is how often the config file and the allowlist file are
// looked at. Edits are rare; reading a small file every few seconds costs
// nothing and needs no inotify watch, which a ConfigMap's symlink swaps
// would defeat.
const reloadPoll = 2 * time.Second

// reloader puts changed settings in force: on SIGHUP, and when the config
// file or the debug image allowlist file changes. A settings set that
// fails to load is logged and counted, and the one in force stays.
type reloader struct {
	src   source
	level *slog.LevelVar
	hup   <-chan os.Signal
	poll  time.Duration // 0: reloadPoll
	// serving is set once crishim told systemd READY=1: a reload before
	// (a SIGHUP kept from start) must not say READY=1 for it.
	serving atomic.Bool

	running    map[string]string // the settings in force, by key
	data       []byte            // the config file as last read
	unreadable bool              // reading it failed at the last poll
	policy     *allowlist.Policy
	audit      auditLog
	metrics    *metrics.Config
	log        *slog.Logger
}

// start watches until ctx ends, beginning from the settings of ld (in
// force now) and acting on the parts that can change live.
func (r *reloader) start(ctx context.Context, ld loaded, policy *allowlist.Policy, auditLog auditLog, m *metrics.Config, log *slog.Logger) {
	r.running, r.data = ld.values(), ld.data
	r.policy, r.audit, r.metrics = policy, auditLog, m
	r.log = log.With("feature", "config")
	poll := r.poll
	if poll == 0 {
		poll = reloadPoll
	}
	go r.watch(ctx, poll)
}

func (r *reloader) watch(ctx context.Context, poll time.Duration) {
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.hup:
			// As nginx's operators expect: SIGHUP after a rotation reopens
			// the audit log (a rename is also seen at the next event).
			if r.audit != nil {
				r.audit.Reopen()
			}
			r.reload("SIGHUP")
		case <-tick.C:
			r.check()
		}
	}
}

// check reloads when the config file changed, or re-reads the allowlist
// file when it did.
func (r *reloader) check() {
	if r.src.file != "" {
		data, err := flagfile.ReadFile(r.src.file)
		switch {
		case err != nil && r.unreadable: // reported already
		case err != nil:
			r.unreadable = true
			r.reload("config file unreadable")
			return
		case r.unreadable || !bytes.Equal(data, r.data):
			// A bad file is reported once, not at every poll.
			r.unreadable, r.data = false, data
			r.reload("config file changed")
			return
		}
	}
	changed, err := r.policy.Refresh()
	switch {
	case err != nil:
		r.metrics.Reload(false)
		r.log.Warn("debug image allowlist not reloaded; the previous list stays in force", "err", err)
	case changed:
		r.metrics.Reload(true)
		r.logAllowlist()
	}
}

// reload loads the settings anew and puts the reloadable ones in force.
func (r *reloader) reload(why string) {
	// systemd shows the unit reloading until READY=1 again, whatever the
	// outcome: a failed reload leaves the settings in force, serving.
	if r.serving.Load() {
		r.notify(sdnotify.Reloading())
		defer r.notify(sdnotify.Ready)
	}
	ld, err := r.src.load()
	if err != nil {
		r.metrics.Reload(false)
		r.log.Error("configuration not reloaded; the settings in force stay", "trigger", why, "err", err)
		return
	}
	r.data = ld.data
	next := ld.values()
	changed, restart := r.changes(next)
	if err := r.keepRunning(ld.fs, restart); err != nil {
		r.metrics.Reload(false)
		r.log.Error("configuration not reloaded; the settings in force stay", "trigger", why, "err", err)
		return
	}
	for _, k := range changed {
		r.log.Info("setting reloaded", "key", k, "old", r.running[k], "new", next[k])
		r.running[k] = next[k]
	}
	for _, k := range restart {
		r.log.Warn("setting changed; it needs a restart to take effect", "key", k, "running", r.running[k], "configured", next[k])
	}
	for _, rl := range reloads {
		rl.apply(r, ld.cfg)
	}
	r.metrics.Reload(true)
	r.log.Info("configuration reloaded", "trigger", why, "file", r.src.file, "changed", changed, "needs_restart", restart)
	r.logAllowlist()
}

// changes are the keys whose new value differs from the one in force,
// sorted: those a reload puts in force, and those that need a restart.
func (r *reloader) changes(next map[string]string) (changed, restart []string) {
	for _, k := range slices.Sorted(maps.Keys(next)) {
		switch {
		case next[k] == r.running[k]:
		case reloadable(k):
			changed = append(changed, k)
		default:
			restart = append(restart, k)
		}
	}
	return changed, restart
}

// keepRunning sets the keys of restart in fs back to their values in
// force, so that the features apply the settings in force with only their
// declared keys changed: a key left out of its feature's list is not put
// in force behind the log's "needs a restart".
func (r *reloader) keepRunning(fs *pflag.FlagSet, restart []string) error {
	for _, k := range restart {
		if err := fs.Set(k, r.running[k]); err != nil {
			return fmt.Errorf("%s back to its value in force %q: %w", k, r.running[k], err)
		}
	}
	return nil
}

func (r *reloader) notify(state string) {
	if err := sdnotify.Notify(state); err != nil {
		r.log.Warn("could not tell systemd about the reload", "err", err)
	}
}

func (r *reloader) logAllowlist() {
	if !r.policy.Enforced() {
		return
	}
	n := r.policy.Len()
	r.log.Info("debug image allowlist in force", "file", r.policy.File(), "patterns", n)
	if n == 0 {
		r.log.Warn("debug image allowlist is empty: every debug container is refused", "file", r.policy.File())
	}
}
