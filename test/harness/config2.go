package harness

import (
	"fmt"
	"strconv"
	"strings"
)

// containerd2Config renders the containerd 2.x config, version 3: the CRI plugin is split
// into io.containerd.cri.v1.images and io.containerd.cri.v1.runtime, and only the server
// settings (streaming) stay under io.containerd.grpc.v1.cri. containerd 2.4 migrates it from
// version 3 to its own 4 on load, logging a warning, and otherwise takes it as written. Every
// key was checked against containerd v2.4.2's sources; beyond the 1.6 config's reasons (see
// containerd16Config), 2.x needs:
//   - the shim manager's socket_dir in the slot: the default, /run/containerd/s, is shared
//     with every other containerd on the machine;
//   - NRI disabled: it is on by default and listens on the host-global /var/run/nri/nri.sock,
//     which two slots (or the machine's own containerd) would fight over. No test needs NRI.
//   - pinned_images.sandbox instead of sandbox_image, which 2.x reads from the images plugin.
//   - registry config_path, as in 1.6, now under the images plugin.
func containerd2Config(l layout, pauseImage string) string {
	q := strconv.Quote
	var b strings.Builder
	writeContainerdHead(&b, 3, l)
	fmt.Fprintf(&b, `
  [plugins."io.containerd.shim.v1.manager"]
    socket_dir = %s

  [plugins."io.containerd.nri.v1.nri"]
    disable = true

  [plugins."io.containerd.grpc.v1.cri"]
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"

    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = %s

    [plugins."io.containerd.cri.v1.images".registry]
      config_path = %s

  [plugins."io.containerd.cri.v1.runtime"]
    restrict_oom_score_adj = true
    disable_apparmor = true
    enable_selinux = false
    netns_mounts_under_state_dir = true

    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"

      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = %s

    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = [%s]
      conf_dir = %s
      max_conf_num = 1
`,
		q(l.shimSockets()),
		q(pauseImage),
		q(l.registryHosts()),
		q(l.runcRoot()),
		q(cniBinDir), q(l.cniConfDir()),
	)
	return b.String()
}
