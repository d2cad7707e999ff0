package main

import (
	"flag"
	"fmt"

	"github.com/crishim/crishim/proxy"
	"github.com/crishim/crishim/shim"
)

// targetConfig holds the flags of PID namespace TARGET and of the containerd
// API it emulates through.
type targetConfig struct {
	pidTargetMode       string
	containerdAddress   string
	containerdNamespace string
}

func (t *targetConfig) register(fs *flag.FlagSet) {
	fs.StringVar(&t.pidTargetMode, "pid-target-mode", shim.PIDTargetAuto, "PID namespace TARGET (debug containers): auto, native or emulate")
	fs.StringVar(&t.containerdAddress, "containerd-address", "", "containerd API socket path, for emulation and container PIDs (default: the path of --runtime-endpoint); set to \"\" to disable")
	fs.StringVar(&t.containerdNamespace, "containerd-namespace", "k8s.io", "containerd namespace of the runtime's CRI objects")
}

// finish validates the flags and fills the defaults that depend on others.
// An explicitly empty --containerd-address disables the containerd API, so
// "not given" and "given empty" are told apart.
func (t *targetConfig) finish(fs *flag.FlagSet, runtimeEndpoint string) error {
	mode, err := shim.ParseMode(t.pidTargetMode)
	if err != nil {
		return fmt.Errorf("--pid-target-mode %w", err)
	}
	t.pidTargetMode = mode
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "containerd-address" })
	if !given {
		if t.containerdAddress, err = proxy.ParseEndpoint(runtimeEndpoint); err != nil {
			return fmt.Errorf("--runtime-endpoint: %w", err)
		}
	}
	if t.containerdAddress != "" && t.containerdNamespace == "" {
		return fmt.Errorf("--containerd-namespace: empty; CRI objects live in a namespace (k8s.io)")
	}
	if t.pidTargetMode == shim.PIDTargetEmulate && t.containerdAddress == "" {
		return fmt.Errorf("--pid-target-mode emulate needs the containerd API, but --containerd-address is empty")
	}
	return nil
}
