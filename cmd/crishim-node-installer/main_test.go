package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReady: the readiness probe answers 0 only once the work wrote its file.
func TestReady(t *testing.T) {
	f := filepath.Join(t.TempDir(), "ready")
	var out bytes.Buffer
	if code := execute(context.Background(), []string{"ready", "--ready-file", f}, &out, &out); code != 1 {
		t.Errorf("ready before the work: exit %d, want 1 (%s)", code, out.String())
	}
	if err := os.WriteFile(f, []byte("v\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := execute(context.Background(), []string{"ready", "--ready-file", f}, &out, &out); code != 0 {
		t.Errorf("ready after the work: exit %d, want 0 (%s)", code, out.String())
	}
}

// TestInstallNeedsTheNode: without --node or $NODE_NAME nothing is done, and it says why.
func TestInstallNeedsTheNode(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	var out bytes.Buffer
	code := execute(context.Background(), []string{"install", "--node", "", "--ready-file", filepath.Join(t.TempDir(), "ready")}, &out, &out)
	if code != 1 || !strings.Contains(out.String(), "--node (or $NODE_NAME) is required") {
		t.Errorf("exit %d, output %q", code, out.String())
	}
}
