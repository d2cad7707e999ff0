// Package crictl builds the crictl the tests run as an operator on the node would.
package crictl

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/crishim/crishim/test/buildcache"
	"github.com/crishim/crishim/test/harness"
)

// Version is the cri-tools release whose crictl the tests run as an
// operator would: the release of critest (test/conformance).
const Version = "v1.37.0"

// crictlCacheDir holds one directory per build key.
var crictlCacheDir = filepath.Join(harness.BaseDir, "crictl-bin")

// Build returns the path of an unmodified crictl of Version, built
// from the Go module proxy in the cri-tools module as downloaded (its own
// go.mod and go.sum decide every dependency, and crishim's module never
// depends on cri-tools) and cached: the first call takes a minute or two.
func Build(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", "sigs.k8s.io/cri-tools@"+Version).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download cri-tools: %w", err)
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out, &m); err != nil || m.Error != "" || m.Dir == "" {
		return "", fmt.Errorf("go mod download cri-tools: %v %s", err, m.Error)
	}
	sum, err := os.ReadFile(filepath.Join(m.Dir, "go.sum"))
	if err != nil {
		return "", fmt.Errorf("read cri-tools go.sum: %w", err)
	}
	// Stamped as cri-tools' release builds are, so `crictl --version` says
	// which release the tests ran.
	ldflags := "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=" + strings.TrimPrefix(Version, "v")
	h := sha256.Sum256(append(sum, runtime.Version()+" "+ldflags...))
	key := Version + "-" + hex.EncodeToString(h[:])[:12]
	dir, err := buildcache.Ensure(ctx, crictlCacheDir, key, func(ctx context.Context, tmp string) error {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags="+ldflags, "-o", filepath.Join(tmp, "crictl"), "./cmd/crictl")
		cmd.Dir = m.Dir
		// As cri-tools' release builds; -mod=readonly: the module cache is
		// read-only and its go.sum complete.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly -buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build crictl in %s: %w\n%s", m.Dir, err, harness.Tail(out, 4096))
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "crictl"), nil
}

// RunAsOperator runs crictl bin against endpoint as an operator who logged
// in with login uid loginUID and became root: a shell sets its own loginuid
// as pam_loginuid does at login (a process whose loginuid is unset may set
// it, given CAP_AUDIT_CONTROL), then becomes crictl, which keeps it as sudo
// would. crictl reads a config file of its own, never the machine's. It answers crictl's
// output, stdout and stderr together.
func RunAsOperator(ctx context.Context, bin string, loginUID int, endpoint string, args ...string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "crictl-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	config := filepath.Join(dir, "crictl.yaml")
	yaml := fmt.Sprintf("runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 60\n", endpoint, endpoint)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		return nil, err
	}
	script := fmt.Sprintf(`echo %d > /proc/self/loginuid && exec "$@"`, loginUID)
	argv := append([]string{"-c", script, "sh", bin, "--config", config}, args...)
	out, err := exec.CommandContext(ctx, "sh", argv...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("crictl %v: %w\n%s", args, err, harness.Tail(out, 4096))
	}
	return out, nil
}
