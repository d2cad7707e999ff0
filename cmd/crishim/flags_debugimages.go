package main

import (
	"github.com/spf13/pflag"

	"github.com/crishim/crishim/allowlist"
)

// debugImagesConfig holds the debug image allowlist flags.
type debugImagesConfig struct {
	patterns     string
	file         string
	otherCallers bool
	policy       *allowlist.Policy
}

func (c *debugImagesConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.patterns, "debug-image-allowlist", "", "PATTERN[,PATTERN...]: images debug containers (PID namespace TARGET) may run: registry/repository with * wildcards, optional :tag or @digest; empty allows any")
	fs.StringVar(&c.file, "debug-image-allowlist-file", "", "file of debug image patterns (one or more a line, # comments), re-read when it changes and on SIGHUP")
	fs.BoolVar(&c.otherCallers, "debug-image-allowlist-other-callers", false, "judge every container a caller other than the kubelet creates (crictl by hand) as a debug container too: its image must be on the allowlist, its create is audited")
	checkValue(fs, "debug-image-allowlist", func(s string) error {
		_, err := allowlist.ParseFlag(s)
		return err
	})
}

// debugImagesReload: the policy is read per debug container.
var debugImagesReload = reload{
	keys:  []string{"debug-image-allowlist", "debug-image-allowlist-file"},
	apply: func(r *reloader, cfg *config) { r.policy.Replace(cfg.debugImages.policy) },
}

// finish reads the patterns now: a bad pattern or an unreadable file is a
// startup error, not a node that silently allows or refuses everything.
func (c *debugImagesConfig) finish() (err error) {
	c.policy, err = allowlist.New(c.patterns, c.file)
	return err
}
