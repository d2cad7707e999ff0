package main

import (
	"strings"
	"testing"
)

func TestStopSignalFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		mode string
		err  string
	}{
		{name: "default", mode: "auto"},
		{name: "native", args: []string{"--stop-signal-mode", "native"}, mode: "native"},
		{name: "emulate", args: []string{"--stop-signal-mode", "emulate"}, mode: "emulate"},
		{name: "unknown mode", args: []string{"--stop-signal-mode", "always"}, err: `"--stop-signal-mode" flag: "always": want auto, native or emulate`},
		{name: "emulate without containerd", args: []string{"--stop-signal-mode", "emulate", "--containerd-address", ""}, err: "--containerd-address is empty"},
		{name: "native without containerd", args: []string{"--stop-signal-mode", "native", "--containerd-address", ""}, mode: "native"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseFlags(tt.args)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parseFlags(%q) = %v; want an error with %q", tt.args, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.stopSignal.mode != tt.mode {
				t.Errorf("mode %q, want %q", c.stopSignal.mode, tt.mode)
			}
		})
	}
}
