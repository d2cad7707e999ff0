package harness

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// CRI-O's paths in a slot. The CRI socket is the slot's usual socket() and the config file
// the slot's usual config(), so that what finds a slot's daemon by its config path in argv
// finds crio too. Everything else CRI-O would put in /var/lib, /var/run, /etc or /var/log
// goes under crio/.
func (l layout) crioDir() string         { return filepath.Join(l.dir, "crio") }
func (l layout) crioStorage() string     { return filepath.Join(l.crioDir(), "storage") }
func (l layout) crioRun() string         { return filepath.Join(l.crioDir(), "run") }
func (l layout) crioConfDir() string     { return filepath.Join(l.crioDir(), "crio.conf.d") }
func (l layout) crioStorageConf() string { return filepath.Join(l.crioDir(), "storage.conf") }
func (l layout) crioRegistries() string  { return filepath.Join(l.crioDir(), "registries.conf") }
func (l layout) crioRegistriesD() string { return filepath.Join(l.crioDir(), "registries.conf.d") }
func (l layout) crioExits() string       { return filepath.Join(l.crioDir(), "exits") }
func (l layout) crioNamespaces() string  { return filepath.Join(l.crioDir(), "ns") }
func (l layout) crioHooks() string       { return filepath.Join(l.crioDir(), "hooks.d") }
func (l layout) crioCDI() string         { return filepath.Join(l.crioDir(), "cdi") }
func (l layout) crioPolicies() string    { return filepath.Join(l.crioDir(), "policies") }
func (l layout) crioMounts() string      { return filepath.Join(l.crioDir(), "mounts.conf") }
func (l layout) crioLogs() string        { return filepath.Join(l.crioDir(), "logs") }
func (l layout) crioRuncWrapper() string { return filepath.Join(l.crioDir(), "runc") }
func (l layout) crioImages() string      { return filepath.Join(l.dir, "images", "oci") }
func (l layout) crioHome() string        { return filepath.Join(l.crioDir(), "home") }

// crioUserPolicy is the policy.json containers/image finds in crio's HOME (crioEnv).
func (l layout) crioUserPolicy() string {
	return filepath.Join(l.crioHome(), ".config", "containers", "policy.json")
}

// crioAttach is where conmon puts attach sockets, <dir>/<64-hex id>/attach. It sits right
// under the slot because a unix socket path has at most 107 bytes: in slot-15 this is 106.
func (l layout) crioAttach() string { return filepath.Join(l.dir, "a") }

// crioStore is containers-storage's bracket form of the slot's store, for ociload.
func (l layout) crioStore() string {
	return "[overlay@" + l.crioStorage() + "+" + l.crioRun() + "]"
}

// crioConfig renders CRI-O 1.34's config. Every key is in crio.conf(5) of 1.34; the reasons
// for the non-default ones:
//   - every path in the slot, so two slots and the host's own CRI-O (if any) never meet.
//   - cgroupfs, monitor (conmon) in the pod's cgroup: there is no systemd.
//   - runtime_path is a wrapper around runc (criobuild/runcwrap): without CAP_SYS_RESOURCE,
//     runc cannot apply the oom_score_adj CRI-O asks for, nor capabilities outside the
//     bounding set.
//   - enable_pod_events: GetContainerEvents streams, as for a kubelet with EventedPLEG;
//     off, CRI-O ends the stream at once.
//   - pause_command empty runs the pause image's own entrypoint: ours is busybox's sh.
//   - signature_policy unset: set, CRI-O refuses creates without image.user_specified_image,
//     which crishimctl debug does not send. PullImage then reads the default policy, which
//     containers/image looks for in $HOME/.config/containers before /etc/containers: crio
//     runs with a HOME in the slot (crioEnv) holding one that accepts anything.
//   - NRI, metrics and irqbalance off: each would use a host-global path.
func crioConfig(l layout, m slotMeta, b crioBins, pauseImage string) string {
	q := strconv.Quote
	var s strings.Builder
	fmt.Fprintf(&s, `[crio]
root = %s
runroot = %s
storage_driver = "overlay"
log_dir = %s
version_file = %s
version_file_persist = %s
clean_shutdown_file = %s

[crio.api]
listen = %s
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
enable_pod_events = true
container_exits_dir = %s
container_attach_socket_dir = %s
namespaces_dir = %s
pinns_path = %s
hooks_dir = [%s]
cdi_spec_dirs = [%s]
default_mounts_file = %s
selinux = false
apparmor_profile = ""
irqbalance_config_file = ""
irqbalance_config_restore_file = "disable"
log_level = "info"

[crio.runtime.runtimes.runc]
runtime_path = %s
runtime_type = "oci"
runtime_root = %s
monitor_path = %s
monitor_cgroup = "pod"

[crio.image]
pause_image = %s
pause_command = ""
signature_policy_dir = %s

[crio.network]
network_dir = %s
plugin_dirs = [%s]
cni_default_network = %s

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = false
`,
		q(l.crioStorage()), q(l.crioRun()), q(l.crioLogs()),
		q(filepath.Join(l.crioRun(), "crio-version")), q(filepath.Join(l.crioDir(), "crio-version")),
		q(filepath.Join(l.crioDir(), "clean.shutdown")),
		q(l.socket()),
		q(l.crioExits()), q(l.crioAttach()), q(l.crioNamespaces()), q(b.pinns()),
		q(l.crioHooks()), q(l.crioCDI()), q(l.crioMounts()),
		q(l.crioRuncWrapper()), q(l.runcRoot()), q(binary("conmon")),
		q(pauseImage), q(l.crioPolicies()),
		q(l.cniConfDir()), q(cniBinDir), q(m.Network),
	)
	return s.String()
}

// crioStorageConfig is containers-storage.conf for the slot: CRI-O's [crio] table sets the
// same root and driver, but ociload reads only this (through CONTAINERS_STORAGE_CONF), and
// both must open one store the same way.
func crioStorageConfig(l layout) string {
	return fmt.Sprintf("[storage]\ndriver = \"overlay\"\ngraphroot = %s\nrunroot = %s\n",
		strconv.Quote(l.crioStorage()), strconv.Quote(l.crioRun()))
}

// crioRegistriesConfig searches no registry for short names: none is reachable, and a test
// must never pull anything by accident. Each mirrored host (Options.Mirrors) gets a
// [[registry]] whose only mirror is the mirror URL's host, plain HTTP allowed (insecure)
// for an http:// URL; CRI-O asks the mirror first and the host itself only when the mirror
// fails, as containerd does with hosts.toml.
func crioRegistriesConfig(mirrors map[string]string) (string, error) {
	var s strings.Builder
	s.WriteString("unqualified-search-registries = []\n")
	hosts := make([]string, 0, len(mirrors))
	for h := range mirrors {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		u, err := url.Parse(mirrors[h])
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || strings.Trim(u.Path, "/") != "" {
			return "", fmt.Errorf("mirror of %s: %q is not an http(s)://host[:port] URL", h, mirrors[h])
		}
		fmt.Fprintf(&s, "\n[[registry]]\nprefix = %s\nlocation = %s\n\n[[registry.mirror]]\nlocation = %s\ninsecure = %t\n",
			strconv.Quote(h), strconv.Quote(h), strconv.Quote(u.Host), u.Scheme == "http")
	}
	return s.String(), nil
}

// crioPolicy accepts any image: nothing is signed on a test bed.
const crioPolicy = `{"default": [{"type": "insecureAcceptAnything"}]}` + "\n"

// writeCRIOMirrors is crioBackend's writeMirrors: the slot's registries.conf, with mirrors.
func writeCRIOMirrors(l layout, mirrors map[string]string) error {
	conf, err := crioRegistriesConfig(mirrors)
	if err != nil {
		return err
	}
	if err := os.WriteFile(l.crioRegistries(), []byte(conf), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", l.crioRegistries(), err)
	}
	return nil
}

// crioRuncWrapperScript runs runcwrap on the system runc; CRI-O's runtime_path takes a
// path, not a command line.
func crioRuncWrapperScript(b crioBins) string {
	return "#!/bin/sh\nexec " + strconv.Quote(b.runcwrap()) + " " + strconv.Quote(binary("runc")) + " \"$@\"\n"
}

// writeCRIOConfig creates the slot's directory tree for CRI-O and writes its config, the
// containers-storage and registries configs, the runc wrapper and the CNI config (the
// same network as containerd's: the slot's bridge and subnet).
func writeCRIOConfig(l layout, m slotMeta, pauseImage string) error {
	b, err := cachedCRIOBins()
	if err != nil {
		return err
	}
	for _, d := range []string{l.crioStorage(), l.crioRun(), l.crioConfDir(), l.crioRegistriesD(), l.crioExits(), l.crioAttach(), l.crioNamespaces(), l.crioHooks(), l.crioCDI(), l.crioPolicies(), l.crioLogs(), l.runcRoot(), l.cniConfDir(), l.ipamDir(), l.crioImages(), l.pods(), filepath.Dir(l.crioUserPolicy())} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	cni, err := cniConfList(l, m)
	if err != nil {
		return err
	}
	registries, err := crioRegistriesConfig(nil)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{l.config(), []byte(crioConfig(l, m, b, pauseImage)), 0o644},
		{l.crioStorageConf(), []byte(crioStorageConfig(l)), 0o644},
		{l.crioRegistries(), []byte(registries), 0o644},
		{l.crioUserPolicy(), []byte(crioPolicy), 0o644},
		// An empty mounts file: CRI-O would otherwise add the host's secrets mounts.
		{l.crioMounts(), nil, 0o644},
		{l.crioRuncWrapper(), []byte(crioRuncWrapperScript(b)), 0o755},
		{filepath.Join(l.cniConfDir(), "10-crishim.conflist"), cni, 0o644},
	} {
		if err := os.WriteFile(f.path, f.data, f.mode); err != nil {
			return fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	return nil
}

// crioEnv is the environment crio and ociload run with: the slot's storage config (which
// crio also reads for the options its [crio] table leaves unset) and registries config, and
// a HOME in the slot, for the policy PullImage reads (and so that no credentials of the
// caller's HOME are ever sent).
func crioEnv(l layout) []string {
	return []string{
		"HOME=" + l.crioHome(),
		"CONTAINERS_STORAGE_CONF=" + l.crioStorageConf(),
		"CONTAINERS_REGISTRIES_CONF=" + l.crioRegistries(),
	}
}

// crioCommand is crio's command line: the slot's config, no drop-in directory of the host's,
// and the registries config given as flags because crio ignores CONTAINERS_REGISTRIES_CONF.
func crioCommand(l layout) []string {
	b, err := cachedCRIOBins()
	crio := b.crio()
	if err != nil {
		crio = "crio" // fails at exec with a clear error; ensureCRIOBinaries ran before anyway
	}
	return []string{crio,
		"--config", l.config(),
		"--config-dir", l.crioConfDir(),
		"--registries-conf", l.crioRegistries(),
		"--registries-conf-dir", l.crioRegistriesD(),
	}
}
