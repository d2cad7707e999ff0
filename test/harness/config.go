package harness

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// criNamespace is the containerd namespace the CRI plugin uses; images must be imported into
// it to be visible through CRI.
const criNamespace = "k8s.io"

// cniBinDir is where Debian's containernetworking-plugins installs the plugins.
const cniBinDir = "/usr/lib/cni"

// disabledPlugins are containerd plugins a test never needs. Disabling them makes start-up
// faster and quieter: the snapshotters probe their filesystems, tracing wants a collector.
// The legacy io.containerd.runtime.v1.linux would be next, but containerd 1.6's
// tasks-service (and with it the CRI plugin) refuses to load without it.
var disabledPlugins = []string{
	"io.containerd.snapshotter.v1.aufs",
	"io.containerd.snapshotter.v1.btrfs",
	"io.containerd.snapshotter.v1.devmapper",
	"io.containerd.snapshotter.v1.zfs",
	"io.containerd.tracing.processor.v1.otlp",
	"io.containerd.internal.v1.tracing",
}

// containerd16Config renders the containerd 1.6 config (version 2). Every key was checked
// against `containerd config default` of 1.6.20; the reasons for the non-default ones:
//   - restrict_oom_score_adj: without CAP_SYS_RESOURCE runc cannot lower oom_score_adj and
//     fails with "can't get final child's PID from pipe".
//   - disable_apparmor: test machines may lack AppArmor, or have it without our profiles.
//   - netns_mounts_under_state_dir: keeps pod netns bind mounts under the slot instead of
//     /var/run/netns, so teardown finds them by path.
//   - runc options Root: keeps runc's state out of /run/containerd/runc, shared with any
//     system containerd.
//   - SystemdCgroup=false: there is no systemd; cgroupfs it is.
//   - registry config_path: the slot's hosts.toml files, for Options.Mirrors.
func containerd16Config(l layout, pauseImage string) string {
	q := strconv.Quote
	var b strings.Builder
	writeContainerdHead(&b, 2, l)
	fmt.Fprintf(&b, `
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %s
    restrict_oom_score_adj = true
    disable_apparmor = true
    enable_selinux = false
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    netns_mounts_under_state_dir = true
    systemd_cgroup = false

    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = %s

    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = %s

    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = %s
      conf_dir = %s
      max_conf_num = 1
`,
		q(pauseImage),
		q(l.runcRoot()),
		q(l.registryHosts()),
		q(cniBinDir), q(l.cniConfDir()),
	)
	return b.String()
}

// writeContainerdHead writes what every containerd config of the harness starts with: the
// slot's root, state, temp and sockets, the plugins no test needs off, debug and metrics
// endpoints off, and the opt plugin's path in the slot. The sections after it differ by
// config version.
func writeContainerdHead(b *strings.Builder, version int, l layout) {
	q := strconv.Quote
	quoted := make([]string, len(disabledPlugins))
	for i, p := range disabledPlugins {
		quoted[i] = q(p)
	}
	fmt.Fprintf(b, `version = %d
root = %s
state = %s
temp = %s
oom_score = 0
disabled_plugins = [%s]

[grpc]
  address = %s

[ttrpc]
  address = %s

[debug]
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %s
`,
		version, q(l.root()), q(l.state()), q(l.temp()), strings.Join(quoted, ", "),
		q(l.socket()), q(l.ttrpc()),
		q(l.opt()),
	)
}

// cniConfList renders the slot's CNI network: a bridge owned by the slot and host-local IPAM
// whose allocations live under the slot directory. ipMasq is off because nothing routes
// traffic out of test pods, and masquerading would add iptables rules to clean up.
func cniConfList(l layout, m slotMeta) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "0.4.0",
		"name":       m.Network,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      m.Bridge,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": l.ipamDir(),
					"ranges":  [][]map[string]string{{{"subnet": m.Subnet}}},
				},
			},
			map[string]any{"type": "loopback"},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode CNI config: %w", err)
	}
	return b, nil
}

// writeContainerdConfigs creates the slot's directory tree and writes containerd's config
// (rendered by the caller for its containerd) and CNI's.
func writeContainerdConfigs(l layout, m slotMeta, config string) error {
	for _, d := range []string{l.root(), l.state(), l.temp(), l.opt(), l.runcRoot(), l.cniConfDir(), l.ipamDir(), filepath.Dir(l.imagesTar()), l.pods()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	if err := os.WriteFile(l.config(), []byte(config), 0o644); err != nil {
		return fmt.Errorf("write containerd config: %w", err)
	}
	cni, err := cniConfList(l, m)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(l.cniConfDir(), "10-crishim.conflist"), cni, 0o644); err != nil {
		return fmt.Errorf("write CNI config: %w", err)
	}
	return nil
}
