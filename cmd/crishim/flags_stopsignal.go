package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/crishim/crishim/shim"
)

// stopSignalConfig holds the stop-signal flag.
type stopSignalConfig struct {
	mode string
}

func (s *stopSignalConfig) register(fs *pflag.FlagSet) {
	fs.StringVar(&s.mode, "stop-signal-mode", shim.StopSignalAuto, "CRI stop_signal: auto, native (the runtime honours it) or emulate (crishim delivers it through the containerd API)")
	checkValue(fs, "stop-signal-mode", checkMode)
}

// checkMode refuses what shim.ParseMode refuses.
func checkMode(s string) error {
	_, err := shim.ParseMode(s)
	return err
}

// finish validates the flag against the containerd API setting, which
// emulation needs to deliver the signal and to record that it did.
func (s *stopSignalConfig) finish(containerdAddress string) error {
	mode, err := shim.ParseMode(s.mode)
	if err != nil {
		return fmt.Errorf("--stop-signal-mode %w", err)
	}
	s.mode = mode
	if s.mode == shim.StopSignalEmulate && containerdAddress == "" {
		return fmt.Errorf("--stop-signal-mode emulate needs the containerd API, but --containerd-address is empty")
	}
	return nil
}
