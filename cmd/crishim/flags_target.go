package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/crishim/crishim/endpoint"
	"github.com/crishim/crishim/shim"
)

// targetConfig holds the flags of PID namespace TARGET and of the containerd
// API it emulates through.
type targetConfig struct {
	pidTargetMode       string
	containerdAddress   string
	containerdNamespace string
}

func (t *targetConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&t.pidTargetMode, "pid-target-mode", shim.PIDTargetAuto, "PID namespace TARGET (debug containers): auto, native or emulate")
	// The default shown is the default runtime endpoint's path; unset, it
	// follows --runtime-endpoint (finish).
	fs.StringVar(&t.containerdAddress, "containerd-address", defaultContainerdAddress, "containerd API socket path, for emulation and container PIDs (unset: the path of --runtime-endpoint); set to \"\" to disable")
	fs.StringVar(&t.containerdNamespace, "containerd-namespace", "k8s.io", "containerd namespace of the runtime's CRI objects")
	checkValue(fs, "pid-target-mode", checkMode)
	checkValue(fs, "containerd-namespace", func(s string) error {
		if s == "" {
			return fmt.Errorf("empty; CRI objects live in a namespace (k8s.io)")
		}
		return nil
	})
}

const defaultContainerdAddress = "/run/containerd/containerd.sock"

// finish validates the flags and fills the defaults that depend on others.
// An explicitly empty --containerd-address disables the containerd API, so
// "not given" and "given empty" are told apart.
func (t *targetConfig) finish(fs *pflag.FlagSet, runtimeEndpoint string) error {
	mode, err := shim.ParseMode(t.pidTargetMode)
	if err != nil {
		return fmt.Errorf("--pid-target-mode %w", err)
	}
	t.pidTargetMode = mode
	if !fs.Changed("containerd-address") {
		if t.containerdAddress, err = endpoint.Parse(runtimeEndpoint); err != nil {
			return fmt.Errorf("--runtime-endpoint: %w", err)
		}
	}
	if t.pidTargetMode == shim.PIDTargetEmulate && t.containerdAddress == "" {
		return fmt.Errorf("--pid-target-mode emulate needs the containerd API, but --containerd-address is empty")
	}
	return nil
}
