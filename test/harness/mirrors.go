package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// registryHosts is containerd's registry config_path: one <host>/hosts.toml per mirrored
// registry. The directory exists (empty) without mirrors, so that pulls go to the registries
// themselves as with no config_path at all.
func (l layout) registryHosts() string { return filepath.Join(l.dir, "certs.d") }

// writeMirrors writes a hosts.toml per mirrored host: containerd asks the mirror first (for
// resolving and pulling, in plain HTTP) and the host itself only when the mirror fails.
func writeMirrors(l layout, mirrors map[string]string) error {
	if err := os.MkdirAll(l.registryHosts(), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", l.registryHosts(), err)
	}
	for host, mirror := range mirrors {
		dir := filepath.Join(l.registryHosts(), host)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		conf := fmt.Sprintf("server = %s\n\n[host.%s]\n  capabilities = [\"pull\", \"resolve\"]\n",
			strconv.Quote("https://"+host), strconv.Quote(mirror))
		if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(conf), 0o644); err != nil {
			return fmt.Errorf("write hosts.toml of %s: %w", host, err)
		}
	}
	return nil
}
