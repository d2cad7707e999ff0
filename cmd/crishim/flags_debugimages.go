package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/crishim/crishim/allowlist"
)

// debugImagesConfig holds the debug image allowlist flags.
type debugImagesConfig struct {
	patterns string
	file     string
	policy   *allowlist.Policy
}

func (c *debugImagesConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&c.patterns, "debug-image-allowlist", "", "PATTERN[,PATTERN...]: images debug containers (PID namespace TARGET) may run: registry/repository with * wildcards, optional :tag or @digest; empty allows any")
	fs.StringVar(&c.file, "debug-image-allowlist-file", "", "file of debug image patterns (one or more a line, # comments), re-read when it changes and on SIGHUP")
}

// finish reads the patterns now: a bad pattern or an unreadable file is a
// startup error, not a node that silently allows or refuses everything.
func (c *debugImagesConfig) finish() (err error) {
	c.policy, err = allowlist.New(c.patterns, c.file)
	return err
}

// allowlistPoll is how often the allowlist file is looked at. Edits are
// rare; a stat every few seconds costs nothing and needs no inotify watch,
// which a ConfigMap's symlink swaps would also defeat.
const allowlistPoll = 2 * time.Second

// watchDebugImages re-reads the allowlist file on change and on SIGHUP
// until ctx ends (the goroutine is owned by run's watch context).
func watchDebugImages(ctx context.Context, p *allowlist.Policy, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		p.Watch(ctx, allowlistPoll, hup, log.With("feature", "debug-images"))
	}()
}
