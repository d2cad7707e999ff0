package node

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/crishim/crishim/test/systemdunit"
)

// The node's kubelet runs as on a kubeadm node with crishim installed the way
// docs/install.md says: from the kubelet package's unit and kubeadm's drop-in (./kubeadm),
// kubeadm's and the operator's environment files (written below), and crishim's files from
// packaging/kubelet as they are. systemd is not PID 1 here, so test/systemdunit computes
// the kubelet's command line and environment from those files.

//go:embed kubeadm/kubelet.service kubeadm/10-kubeadm.conf
var kubeadmFiles embed.FS

// Where a kubeadm node keeps the files the bed writes.
const (
	kubeletUnit        = "/usr/lib/systemd/system/kubelet.service"
	kubeadmDropIn      = "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"
	kubeadmFlagsEnv    = "/var/lib/kubelet/kubeadm-flags.env"
	kubeletDefaultsEnv = "/etc/default/kubelet"
	kubeadmKubeletYAML = "/var/lib/kubelet/config.yaml"
	kubeletKubeconfig  = "/etc/kubernetes/kubelet.conf"
	kubeletRootDir     = "/var/lib/kubelet"
	crishimSocket      = "/run/crishim/crishim.sock"
)

// crishimKubeletFiles are crishim's kubelet files: where docs/install.md installs each,
// by its path under packaging/.
var crishimKubeletFiles = []struct{ src, dst string }{
	{"kubelet/kubelet.service.d/90-crishim.conf", "/etc/systemd/system/kubelet.service.d/90-crishim.conf"},
	{"kubelet/kubelet.conf.d/90-crishim.conf", "/etc/kubernetes/kubelet.conf.d/90-crishim.conf"},
}

// nodePrefixes are the parts of the file system a kubeadm node's files name that the bed
// keeps under the node's root directory (every unit directory too, so that no unit of the
// machine's own joins in); see layout.hostPath.
var nodePrefixes = []string{"/etc/", "/run/systemd/", "/usr/local/lib/systemd/", "/usr/lib/systemd/", "/lib/systemd/", "/var/lib/kubelet/", "/run/crishim/"}

// hostPath is the one place that maps the absolute paths of the unit files, kubeadm's files
// and crishim's packaging to the bed: those under nodePrefixes live under the node's root
// directory, /usr/bin/kubelet is the bed's build, and anything else (/bin/sh) is the
// machine's own.
func (l layout) hostPath(bins Binaries) func(string) string {
	root := l.path("root")
	return func(p string) string {
		if p == "/usr/bin/kubelet" {
			return bins.Path("kubelet")
		}
		for _, prefix := range nodePrefixes {
			if strings.HasPrefix(p+"/", prefix) {
				return filepath.Join(root, p)
			}
		}
		return p
	}
}

// mapArgv applies hostPath to the arguments that are absolute paths or --flag=/path.
func mapArgv(argv []string, hostPath func(string) string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		name, value, ok := strings.Cut(a, "=")
		switch {
		case strings.HasPrefix(a, "/"):
			out[i] = hostPath(a)
		case ok && strings.HasPrefix(name, "-") && strings.HasPrefix(value, "/"):
			out[i] = name + "=" + hostPath(value)
		default:
			out[i] = a
		}
	}
	return out
}

var unixEndpoint = regexp.MustCompile(`unix://(/\S+)`)

// mapEndpoints applies hostPath to the unix:// endpoints of a configuration file.
func mapEndpoints(b []byte, hostPath func(string) string) []byte {
	return unixEndpoint.ReplaceAllFunc(b, func(m []byte) []byte {
		return []byte("unix://" + hostPath(string(m[len("unix://"):])))
	})
}

// kubeadmFlags is the kubeadm-flags.env kubeadm init writes for this node.
func kubeadmFlags(s state) string {
	return fmt.Sprintf("KUBELET_KUBEADM_ARGS=\"--hostname-override=%s --node-ip=%s\"\n", s.Name, s.NodeIP)
}

// kubeletDefaults is the operator's /etc/default/kubelet. It sets KUBELET_EXTRA_ARGS, as
// every kubeadm node does (the kubelet deb ships it empty), which is what made the old
// Environment=KUBELET_EXTRA_ARGS drop-in of crishim lose; the flags are the bed's own: the
// kubelet's directories (their defaults, named so that hostPath maps them under the node's
// root), and its log level.
const kubeletDefaults = "KUBELET_EXTRA_ARGS=\"--root-dir=" + kubeletRootDir + " --cert-dir=" + kubeletRootDir + "/pki --v=2\"\n"

// writeKubeadmNode writes what the kubelet and kubeadm packages and kubeadm init leave on a
// node: the units, kubeadm-flags.env, /etc/default/kubelet and the kubelet's config.yaml,
// whose containerRuntimeEndpoint is containerd's (kubeadm's criSocket).
func (n *Node) writeKubeadmNode() error {
	return writeKubeadmNode(n.l.hostPath(n.bins), n.s, kubeletConfig(n.l, n.s, n.pki, n.s.ContainerdEndpoint))
}

func writeKubeadmNode(hostPath func(string) string, s state, kubeletYAML string) error {
	files := map[string][]byte{
		kubeadmFlagsEnv:    []byte(kubeadmFlags(s)),
		kubeletDefaultsEnv: []byte(kubeletDefaults),
		kubeadmKubeletYAML: []byte(kubeletYAML),
	}
	for dst, src := range map[string]string{kubeletUnit: "kubeadm/kubelet.service", kubeadmDropIn: "kubeadm/10-kubeadm.conf"} {
		b, err := kubeadmFiles.ReadFile(src)
		if err != nil {
			return err
		}
		files[dst] = b
	}
	for dst, b := range files {
		if err := writeFile(hostPath(dst), b); err != nil {
			return err
		}
	}
	return nil
}

// installCrishimKubeletFiles installs crishim's kubelet files as docs/install.md does, the
// endpoints in the KubeletConfiguration drop-in mapped to the node's root.
func (n *Node) installCrishimKubeletFiles() error {
	return installCrishimKubeletFiles(n.l.hostPath(n.bins))
}

func installCrishimKubeletFiles(hostPath func(string) string) error {
	dir, err := packagingDir()
	if err != nil {
		return err
	}
	for _, f := range crishimKubeletFiles {
		b, err := os.ReadFile(filepath.Join(dir, f.src))
		if err != nil {
			return err
		}
		if err := writeFile(hostPath(f.dst), mapEndpoints(b, hostPath)); err != nil {
			return err
		}
	}
	return nil
}

// removeCrishimKubeletFiles is docs/install.md's way back to containerd.
func (n *Node) removeCrishimKubeletFiles() error {
	hostPath := n.l.hostPath(n.bins)
	for _, f := range crishimKubeletFiles {
		if err := os.Remove(hostPath(f.dst)); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// KubeletStart is how systemd would start the node's kubelet from its unit files now, with
// the paths mapped to the bed.
func (n *Node) KubeletStart() (systemdunit.Start, error) {
	_, st, err := kubeletStart(n.l.hostPath(n.bins))
	return st, err
}

func kubeletStart(hostPath func(string) string) (*systemdunit.Service, systemdunit.Start, error) {
	unit, err := systemdunit.Load("kubelet.service", hostPath)
	if err != nil {
		return nil, systemdunit.Start{}, err
	}
	st, err := unit.Start(hostPath)
	if err != nil {
		return nil, systemdunit.Start{}, err
	}
	st.ExecStart.Argv = mapArgv(st.ExecStart.Argv, hostPath)
	return unit, st, nil
}

// startKubelet is `systemctl start kubelet`: the ExecStartPre commands with the unit's
// environment (one failing stops the start, with its output), then the kubelet.
func (n *Node) startKubelet(ctx context.Context) (<-chan struct{}, error) {
	st, err := n.KubeletStart()
	if err != nil {
		return nil, err
	}
	if err := runExecStartPre(ctx, st); err != nil {
		return nil, err
	}
	argv := st.ExecStart.Argv
	return startDaemon(n.l, argv[0], argv[1:], st.Env...)
}

func runExecStartPre(ctx context.Context, st systemdunit.Start) error {
	for _, c := range st.ExecStartPre {
		cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
		cmd.Env = append(os.Environ(), st.Env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil && !c.IgnoreFailure {
			return fmt.Errorf("kubelet.service ExecStartPre %s: %w: %s", c.Argv[0], err, bytes.TrimSpace(out.Bytes()))
		}
	}
	return nil
}

// packagingDir is packaging/ of the checkout this package was compiled from.
func packagingDir() (string, error) {
	dir, err := manifestsDir()
	if err != nil {
		return "", err
	}
	return filepath.Dir(dir), nil
}
