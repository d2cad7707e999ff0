package harness

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// Runtime names the container runtime a slot runs behind crishim.
type Runtime string

const (
	// RuntimeContainerd is containerd v2.4.2, built from the Go module proxy and cached under
	// BaseDir/containerd-bin (see containerdbin.go); the default.
	RuntimeContainerd Runtime = "containerd"
	// RuntimeCRIO is CRI-O 1.34.
	RuntimeCRIO Runtime = "crio"
	// RuntimeContainerd16 is Debian 12's containerd package (1.6.20), the test bed's runtime
	// before containerd 2.x.
	RuntimeContainerd16 Runtime = "containerd-1.6"
)

// Runtimes lists every runtime the harness knows, default first.
var Runtimes = []Runtime{RuntimeContainerd, RuntimeCRIO, RuntimeContainerd16}

// RuntimeEnv is the environment variable that selects the runtime (`make test RUNTIME=crio`).
const RuntimeEnv = "RUNTIME"

// RuntimeFromEnv reads $RUNTIME: empty means RuntimeContainerd, an unknown value is an error
// naming the allowed ones.
func RuntimeFromEnv() (Runtime, error) {
	return ParseRuntime(os.Getenv(RuntimeEnv))
}

// ParseRuntime checks a runtime name; "" is the default, RuntimeContainerd.
func ParseRuntime(s string) (Runtime, error) {
	if s == "" {
		return RuntimeContainerd, nil
	}
	for _, r := range Runtimes {
		if Runtime(s) == r {
			return r, nil
		}
	}
	names := make([]string, len(Runtimes))
	for i, r := range Runtimes {
		names[i] = string(r)
	}
	return "", fmt.Errorf("unknown runtime %s=%q: want one of %s (empty: %s)", RuntimeEnv, s, strings.Join(names, ", "), RuntimeContainerd)
}

// IsContainerd reports whether r is a containerd (any version): crishim then gets its
// socket as --containerd-address too.
func (r Runtime) IsContainerd() bool {
	return r == RuntimeContainerd || r == RuntimeContainerd16
}

// backend is everything the harness does differently per runtime. Start, Restart and the
// teardown of a slot reach a runtime only through it, so a new runtime is one more
// backendFor case and the files that fill its backend.
type backend struct {
	runtime Runtime
	// prepare installs or builds what the runtime needs (packages, binaries). It runs before
	// a slot is taken, so a long build holds no slot.
	prepare func(ctx context.Context) error
	// writeConfig writes the daemon's config (and creates the directories it names).
	writeConfig func(l layout, m slotMeta, pauseImage string) error
	// command is the daemon's argv and the PATH it runs with.
	command func(l layout) (argv []string, path string)
	// env, if set, is more environment for the daemon (CRI-O's storage config).
	env func(l layout) []string
	// importImages puts the offline images into the runtime's CRI image store.
	importImages func(ctx context.Context, l layout) error
	// importArchive puts one more OCI image archive into the runtime's CRI image store and
	// waits until CRI reports names.
	importArchive func(ctx context.Context, l layout, archive []byte, names ...string) error
	// tagImage gives an imported image another name, as the node's pods ask for it.
	tagImage func(ctx context.Context, l layout, src, dst string) error
	// writeMirrors, if set, writes Options.Mirrors into the runtime's registry config
	// after writeConfig; unset, they go to containerd's hosts.toml files (writeMirrors).
	writeMirrors func(l layout, mirrors map[string]string) error
}

// backendFor is the dispatch point between runtimes: every per-runtime difference of a
// start starts here. Teardown needs no backend for either containerd (it finds the
// daemon by daemonNames, shims and containers by the slot's paths); a slot's runtime is
// recorded in its slot.json (slotMeta.runtime) for a runtime whose teardown differs.
func backendFor(r Runtime) (*backend, error) {
	switch r {
	case RuntimeContainerd:
		return containerd2Backend(), nil
	case RuntimeContainerd16:
		return containerd16Backend(), nil
	case RuntimeCRIO:
		return crioBackend(), nil
	}
	_, err := ParseRuntime(string(r))
	return nil, err
}

// runtime is the runtime a slot's metadata records, for messages and for a backend whose
// teardown differs; slots written before runtimes were recorded ran Debian's containerd.
func (m slotMeta) runtime() Runtime {
	if m.Runtime == "" {
		return RuntimeContainerd16
	}
	return m.Runtime
}
