package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/crishim/crishim/test/harness"
)

// apiserverURL is where the systemd node's control plane listens: the host end of its link.
func (n *Node) apiserverURL() string {
	return "https://" + net.JoinHostPort(sysnodeHostIP(n.s.Index), strconv.Itoa(n.s.APIServerPort))
}

// writeSysnodePKI issues the certificates and kubeconfigs: the host's clients' as for the
// other nodes, the kubelet's written into the node where kubeadm puts them.
func (n *Node) writeSysnodePKI() error {
	kp, err := n.issuePKI(n.apiserverURL(), net.ParseIP(sysnodeHostIP(n.s.Index)), net.ParseIP(n.s.NodeIP))
	if err != nil {
		return err
	}
	for src, dst := range map[string]string{n.pki.CA(): sysnodeKubeletCA, kp.Cert: "/var/lib/kubelet/pki/kubelet-client.crt", kp.Key: "/var/lib/kubelet/pki/kubelet-client.key"} {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := writeFile(n.nodePath(dst), b); err != nil {
			return err
		}
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: crishim-node
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: kubelet
  user:
    client-certificate: /var/lib/kubelet/pki/kubelet-client.crt
    client-key: /var/lib/kubelet/pki/kubelet-client.key
contexts:
- name: crishim-node
  context:
    cluster: crishim-node
    user: kubelet
current-context: crishim-node
`, n.apiserverURL(), sysnodeKubeletCA)
	return writeFile(n.nodePath(kubeletKubeconfig), []byte(kc))
}

// startSysnodeControlPlane starts etcd, the apiserver (on the host end of the node's link),
// the controller-manager and the scheduler, on the host.
func (n *Node) startSysnodeControlPlane(ctx context.Context) error {
	l := n.l
	if _, err := startDaemon(l, n.bins.Path("etcd"), etcdArgs(l, n.s)); err != nil {
		return err
	}
	if err := waitTCP(ctx, n.s.EtcdAddr); err != nil {
		return fmt.Errorf("etcd: %w\n%s", err, logTail(l, "etcd"))
	}
	args := apiserverArgs(l, n.s, n.pki)
	for i := range args {
		if args[i] == "--bind-address" {
			args[i+1] = sysnodeHostIP(n.s.Index)
		}
	}
	apiserver, err := startDaemon(l, n.bins.Path("kube-apiserver"), args)
	if err != nil {
		return err
	}
	if err := n.fill(); err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := n.waitHTTPOK(ctx, client, n.apiserverURL()+"/readyz", apiserver, "kube-apiserver"); err != nil {
		return err
	}
	if _, err := startDaemon(l, n.bins.Path("kube-controller-manager"), controllerManagerArgs(l, n.pki)); err != nil {
		return err
	}
	_, err = startDaemon(l, n.bins.Path("kube-scheduler"), schedulerArgs(l))
	return err
}

// installContainerd installs the bed's containerd build where its upstream unit expects it
// (/usr/local/bin), the unit from containerd's source, a config naming the bed's offline
// pause image and a CNI network, then starts it and imports the bed's images.
func (n *Node) installContainerd(ctx context.Context, cdDir string) error {
	for _, c := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
		if err := copyFile(filepath.Join(cdDir, c), n.nodePath("/usr/local/bin/"+c), 0o755); err != nil {
			return err
		}
	}
	unit, err := containerdUnit(ctx)
	if err != nil {
		return err
	}
	if err := copyFile(unit, n.nodePath(containerdUnitPath), 0o644); err != nil {
		return err
	}
	// As the harness's containerd: oom_score_adj of pods kept at or above containerd's own
	// (the test machine's root may lack CAP_SYS_RESOURCE, this one does, and runc then dies
	// creating every sandbox: "can't get final child's PID from pipe: EOF"), no AppArmor or
	// SELinux, network namespaces under the state dir.
	cfg := fmt.Sprintf(`version = 3

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = %q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
`, harness.PauseImage)
	if err := writeFile(n.nodePath(containerdConfig), []byte(cfg)); err != nil {
		return err
	}
	cni := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "crishim-testbed",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}}
  ]
}
`, sysnodePodSubnet)
	if err := writeFile(n.nodePath(sysnodeCNIConflist), []byte(cni)); err != nil {
		return err
	}
	if _, err := n.NodeExec(ctx, "systemctl", "daemon-reload"); err != nil {
		return err
	}
	if _, err := n.NodeExec(ctx, "systemctl", "enable", "--now", "containerd"); err != nil {
		return err
	}
	archive, err := harness.ImageArchive(ctx)
	if err != nil {
		return err
	}
	if err := writeFile(n.nodePath(sysnodeImagesTar), archive); err != nil {
		return err
	}
	if _, err := n.NodeExec(ctx, "ctr", "-n", "k8s.io", "images", "import", sysnodeImagesTar); err != nil {
		return err
	}
	_, err = n.NodeExec(ctx, "ctr", "-n", "k8s.io", "images", "tag", "--force", harness.BusyboxImage, BusyboxLatest)
	return err
}

// containerdUnit is containerd.service of the containerd module the bed builds.
func containerdUnit(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", "github.com/containerd/containerd/v2@"+harness.ContainerdVersion).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download containerd: %w", err)
	}
	const key = `"Dir": "`
	i := strings.Index(string(out), key)
	if i < 0 {
		return "", fmt.Errorf("go mod download containerd: no Dir in %s", out)
	}
	dir, _, _ := strings.Cut(string(out[i+len(key):]), `"`)
	return filepath.Join(dir, containerdUnitInMod), nil
}

// InstallDeb installs a crishim package in the node with apt-get, as an operator does;
// its maintainer scripts enable and start (or restart) crishim.service.
func (n *Node) InstallDeb(ctx context.Context, deb string) error {
	dst := filepath.Join(sysnodeDebDir, filepath.Base(deb))
	if err := copyFile(deb, n.nodePath(dst), 0o644); err != nil {
		return err
	}
	_, err := n.NodeExec(ctx, "apt-get", "install", "-y", "--no-install-recommends", "-o", "Dpkg::Options::=--force-confold", dst)
	return err
}

func (n *Node) installCrishimDeb(ctx context.Context, deb string) error {
	if err := n.InstallDeb(ctx, deb); err != nil {
		return err
	}
	// The operator's setting: metrics on the node's address, so the host reaches them.
	cfg := fmt.Sprintf("version = 1\nmetrics-address = %q\n", n.s.CrishimMetrics)
	if err := writeFile(n.nodePath(crishimConfig), []byte(cfg)); err != nil {
		return err
	}
	if _, err := n.NodeExec(ctx, "systemctl", "restart", "crishim"); err != nil {
		return err
	}
	n.s.CrishimSock = n.nodePath(crishimSocket)
	return writeState(n.l, n.s)
}

// installKubelet lays out a kubeadm node (the kubelet package's unit, kubeadm's drop-in,
// kubeadm-flags.env, /etc/default/kubelet, config.yaml naming containerd as kubeadm's
// criSocket), copies crishim's kubelet drop-ins from the installed package as
// docs/install.md says (pointCrishim; otherwise the kubelet stays on containerd), and
// starts the kubelet with systemctl.
func (n *Node) installKubelet(ctx context.Context, pointCrishim bool) error {
	if err := copyFile(n.bins.Path("kubelet"), n.nodePath("/usr/bin/kubelet"), 0o755); err != nil {
		return err
	}
	if err := writeFile(n.nodePath(sysnodeResolvConf), []byte("# no DNS on the test node\n")); err != nil {
		return err
	}
	s := n.s
	if err := writeKubeadmNode(n.nodePath, s, sysnodeKubeletConfig(s)); err != nil {
		return err
	}
	if err := writeFile(n.nodePath(kubeletDefaultsEnv), []byte("KUBELET_EXTRA_ARGS=\"--v=2\"\n")); err != nil {
		return err
	}
	if !pointCrishim {
		_, err := n.NodeExec(ctx, "sh", "-c", "systemctl enable kubelet && systemctl daemon-reload && systemctl restart kubelet")
		return err
	}
	// The kubelet package enables its unit; then docs/install.md's commands, as they are.
	if _, err := n.NodeExec(ctx, "sh", "-c", `set -e
systemctl enable kubelet
install -D -m 0644 /usr/share/crishim/kubelet/kubelet.service.d/90-crishim.conf /etc/systemd/system/kubelet.service.d/90-crishim.conf
install -D -m 0644 /usr/share/crishim/kubelet/kubelet.conf.d/90-crishim.conf /etc/kubernetes/kubelet.conf.d/90-crishim.conf
systemctl daemon-reload && systemctl restart kubelet`); err != nil {
		return err
	}
	return nil
}

// sysnodeKubeletConfig is the KubeletConfiguration of the systemd node: kubeadm's, with
// containerd as its runtime (crishim's drop-in overrides it), the cgroupfs driver
// (containerd's default, which it reports to the kubelet) and the bed's tiny eviction
// thresholds.
func sysnodeKubeletConfig(s state) string {
	return kubeletValues{
		Endpoint: s.ContainerdEndpoint, ClientCA: sysnodeKubeletCA, ResolvConf: sysnodeResolvConf,
		Gates: []string{"ContainerStopSignals"},
	}.render()
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// CleanSystemd tears systemd node index down, whoever started it: its PID 1 (the kernel
// ends every process of its PID namespace with it, and its mounts with its mount
// namespace), the control plane on the host, the bridge, the cgroups, the directory.
func CleanSystemd(index int) error {
	l := layout{SysnodeDir(index)}
	s, serr := readState(l)
	if serr != nil && !errors.Is(serr, os.ErrNotExist) {
		s = state{Index: index}
	}
	var errs []error
	hs, err := hostCgroupHierarchies()
	if err != nil {
		return err
	}
	if s.SystemdPID > 0 && ownsPID(hs, index, s.SystemdPID) {
		_ = syscall.Kill(s.SystemdPID, syscall.SIGKILL)
	}
	if err := stopDaemons(l, "", 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := harness.Poll(ctx, 50*time.Second, func(context.Context) error {
		if !cgroupEmpty(hs, sysnodeCgroup(index)) {
			return errors.New("processes left in the node's cgroup")
		}
		return nil
	}); err != nil {
		errs = append(errs, err)
	}
	if err := removeSysnodeCgroup(hs, sysnodeCgroup(index)); err != nil {
		errs = append(errs, err)
	}
	for _, link := range []string{sysnodeVeth(index), sysnodeBridge(index)} {
		if err := deleteLink(ctx, link); err != nil {
			errs = append(errs, err)
		}
	}
	if err := harness.UnmountUnder(l.dir); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(l.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ownsPID reports whether pid is in the node's cgroup, so that a recorded PID the kernel
// has since given to another process is never killed.
func ownsPID(hs []cgroupHierarchy, index, pid int) bool {
	for _, d := range sysnodeCgroupDirs(hs, sysnodeCgroup(index)) {
		var found bool
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if f == strconv.Itoa(pid) {
					found = true
					return filepath.SkipAll
				}
			}
			return nil
		})
		if found {
			return true
		}
	}
	return false
}

// ImportImage imports an OCI archive into the node's containerd (the kubelet's k8s.io
// namespace), as an operator loads an image built offline.
func (n *Node) ImportImage(ctx context.Context, archive []byte) error {
	const dst = "/var/lib/crishim-testbed/import.oci.tar"
	if err := writeFile(n.nodePath(dst), archive); err != nil {
		return err
	}
	_, err := n.NodeExec(ctx, "ctr", "-n", "k8s.io", "images", "import", dst)
	return err
}

// APIServerURL is the control plane's address as the node reaches it (the host end of its
// link): pods of the node's network reach the API server there (the bed runs no kube-proxy
// for the kubernetes Service).
func (n *Node) APIServerURL() string { return n.apiserverURL() }
