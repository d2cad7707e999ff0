package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDebugImageFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "allow")
	if err := os.WriteFile(file, []byte("registry.corp/debug/*\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		enforced bool
		err      string
	}{
		{name: "default: any image", enforced: false},
		{name: "patterns", args: []string{"--debug-image-allowlist", "busybox:1.36,registry.corp/debug/*"}, enforced: true},
		{name: "file", args: []string{"--debug-image-allowlist-file", file}, enforced: true},
		{name: "bad pattern", args: []string{"--debug-image-allowlist", "busybox,UPPER"}, err: `--debug-image-allowlist: pattern "UPPER"`},
		{name: "missing file", args: []string{"--debug-image-allowlist-file", file + ".missing"}, err: "--debug-image-allowlist-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ok := parseFlagsOrErr(t, tt.args, tt.err)
			if !ok {
				return
			}
			if got := c.debugImages.policy.Enforced(); got != tt.enforced {
				t.Errorf("enforced = %v, want %v", got, tt.enforced)
			}
		})
	}
}
