package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/crishim/crishim/test/harness"
)

// The systemd node: a Debian 12 whose PID 1 is systemd, in namespaces of its own (sysns.go),
// with containerd 2.4 (the bed's build, its upstream unit), the kubelet under kubeadm's
// kubelet.service and 10-kubeadm.conf, and crishim installed from the .deb `make deb` builds
// with apt-get and started by systemd: a node as operators run one. The control plane stays
// on the host, as for the other nodes, listening on the host end of the node's link.
//
// Node i (SysnodeMaxIndex bounds it) owns: the directory SysnodeDir(i), the host bridge
// crishimsys<i> with 10.244.(160+i).1/24 and the veth crishimsysv<i> on it, the node's eth0
// with 10.244.(160+i).2, the cgroup /crishim-sysnode-<i> in every hierarchy. Pods get
// 10.85.0.0/24 on the node's own bridge, inside its network namespace.

// SysnodeMaxIndex is the largest systemd node index: the link subnets stay below the
// test nodes' 10.244.199.0/24.
const SysnodeMaxIndex = 38

// SysnodeDir is systemd node index's directory.
func SysnodeDir(index int) string {
	return filepath.Join(harness.BaseDir, "sysnode-"+strconv.Itoa(index))
}

func sysnodeBridge(i int) string   { return "crishimsys" + strconv.Itoa(i) }
func sysnodeVeth(i int) string     { return "crishimsysv" + strconv.Itoa(i) }
func sysnodeHostIP(i int) string   { return fmt.Sprintf("10.244.%d.1", 160+i) }
func sysnodeNodeIP(i int) string   { return fmt.Sprintf("10.244.%d.2", 160+i) }
func sysnodeCgroup(i int) string   { return "crishim-sysnode-" + strconv.Itoa(i) }
func sysnodeHostname(i int) string { return "crishim-sysnode-" + strconv.Itoa(i) }

const sysnodePodSubnet = "10.85.0.0/24"

// In-node paths.
const (
	crishimConfig       = "/etc/crishim/config.toml"
	crishimMetricsPort  = 9847
	sysnodeImagesTar    = "/var/lib/crishim-testbed/images.tar"
	sysnodeDebDir       = "/var/lib/crishim-testbed/deb"
	containerdUnitPath  = "/etc/systemd/system/containerd.service"
	containerdConfig    = "/etc/containerd/config.toml"
	sysnodeCNIConflist  = "/etc/cni/net.d/10-crishim-testbed.conflist"
	sysnodeResolvConf   = "/etc/kubernetes/resolv.conf"
	sysnodeKubeletCA    = "/etc/kubernetes/pki/ca.crt"
	containerdUnitInMod = "containerd.service"
)

// SystemdOptions say which systemd node to run.
type SystemdOptions struct {
	Index int
	Deb   string // the crishim package to install (dist/crishim_*.deb)
	// Direct leaves crishim out: no package, no kubelet drop-ins; the kubelet talks to
	// containerd, as on a node the fleet installer has not reached yet.
	Direct bool
	Log    *slog.Logger
}

// StartSystemd sweeps systemd node opts.Index and brings it up: the root file system
// (cached), the namespaces with systemd as PID 1, the control plane on the host, then inside
// the node containerd, crishim from the package and the kubelet, each with systemctl. It
// returns once the node is Ready.
func StartSystemd(ctx context.Context, opts SystemdOptions) (*Node, error) {
	if opts.Index < 1 || opts.Index > SysnodeMaxIndex {
		return nil, fmt.Errorf("systemd node index %d: want 1 to %d", opts.Index, SysnodeMaxIndex)
	}
	log := logger(Options{Log: opts.Log})
	bins, err := EnsureBinaries(ctx, log)
	if err != nil {
		return nil, err
	}
	cdDir, err := harness.ContainerdBinDir(ctx)
	if err != nil {
		return nil, err
	}
	lower, err := EnsureRootfs(ctx, log)
	if err != nil {
		return nil, err
	}
	if err := CleanSystemd(opts.Index); err != nil {
		return nil, fmt.Errorf("sweep systemd node %d: %w", opts.Index, err)
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	n := &Node{l: layout{SysnodeDir(opts.Index)}, log: log, bins: bins}
	if err := n.startSystemd(ctx, opts, lower, cdDir, log.Info); err != nil {
		return nil, fmt.Errorf("start systemd node %d: %w", opts.Index, err)
	}
	return n, nil
}

// boot starts node i's namespaces from the root file system lower and waits until its
// systemd answers running.
func (n *Node) boot(ctx context.Context, i int, lower string) error {
	l := n.l
	for _, d := range []string{l.dir, l.path("logs"), l.path("upper"), l.path("work"), l.path("root"), l.path("containerd"), l.path("kubelet")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	n.s = state{
		Index:              i,
		Name:               sysnodeHostname(i),
		NodeIP:             sysnodeNodeIP(i),
		Iface:              sysnodeBridge(i),
		CgroupRoot:         "/",
		Runtime:            harness.RuntimeContainerd,
		ContainerdEndpoint: "unix:///run/containerd/containerd.sock",
		ContainerdAddress:  "/run/containerd/containerd.sock",
		CrishimMetrics:     net.JoinHostPort(sysnodeNodeIP(i), strconv.Itoa(crishimMetricsPort)),
		EtcdAddr:           "127.0.0.1:" + strconv.Itoa(ports[0]),
		EtcdPeerAddr:       "127.0.0.1:" + strconv.Itoa(ports[1]),
		APIServerPort:      ports[2],
		KubeletPort:        10250,
		KubeletHealthzPort: 10248,
		Kubeconfig:         l.path("admin.kubeconfig"),
		Version:            n.bins.Version,
		Bins:               n.bins.Dir,
		Systemd:            true,
	}
	hs, err := hostCgroupHierarchies()
	if err != nil {
		return err
	}
	if err := writeState(l, n.s); err != nil {
		return err
	}
	if err := addSysnodeBridge(ctx, i); err != nil {
		return err
	}
	if err := createSysnodeCgroup(hs, sysnodeCgroup(i)); err != nil {
		return err
	}
	// The node's own writable layer: its hostname, and kubelet and containerd state on the
	// host's file system (overlayfs cannot be the upper layer of containerd's snapshots).
	if err := writeFile(filepath.Join(l.path("upper"), "etc/hostname"), []byte(n.s.Name+"\n")); err != nil {
		return err
	}
	// systemd-sysctl applies Debian's sysctl.d to the kernel, the host's: /proc/sys is
	// read-only in the node, but not trying is better than failing quietly.
	if err := os.MkdirAll(filepath.Join(l.path("upper"), "etc/systemd/system"), 0o755); err != nil {
		return err
	}
	if err := os.Symlink("/dev/null", filepath.Join(l.path("upper"), "etc/systemd/system/systemd-sysctl.service")); err != nil {
		return err
	}
	binds := [][2]string{{l.path("containerd"), "/var/lib/containerd"}, {l.path("kubelet"), "/var/lib/kubelet"}}

	pid, release, err := n.launch(lower, hs, binds)
	if err != nil {
		return err
	}
	n.s.SystemdPID = pid
	if err := writeState(l, n.s); err != nil {
		return err
	}
	if err := moveIntoCgroup(hs, sysnodeCgroup(i), pid); err != nil {
		return err
	}
	if err := addSysnodeVeth(ctx, i, pid); err != nil {
		return err
	}
	if err := release(); err != nil {
		return err
	}
	return n.waitSystemRunning(ctx)
}

func (n *Node) startSystemd(ctx context.Context, opts SystemdOptions, lower, cdDir string, info func(string, ...any)) error {
	info("booting systemd in the node's namespaces", "dir", n.l.dir)
	if err := n.boot(ctx, opts.Index, lower); err != nil {
		return err
	}
	if err := n.writeSysnodePKI(); err != nil {
		return err
	}
	info("starting etcd and kube-apiserver on the host")
	if err := n.startSysnodeControlPlane(ctx); err != nil {
		return err
	}

	info("installing containerd with its upstream unit")
	if err := n.installContainerd(ctx, cdDir); err != nil {
		return err
	}
	if opts.Direct {
		// Where crishim's socket will be once something installs it.
		n.s.CrishimSock = n.nodePath(crishimSocket)
		if err := writeState(n.l, n.s); err != nil {
			return err
		}
		info("starting the kubelet under kubeadm's unit, straight on containerd")
	} else {
		info("installing crishim from its package", "deb", opts.Deb)
		if err := n.installCrishimDeb(ctx, opts.Deb); err != nil {
			return err
		}
		info("starting the kubelet under kubeadm's unit and crishim's drop-ins")
	}
	if err := n.installKubelet(ctx, !opts.Direct); err != nil {
		return err
	}
	if err := n.WaitReady(ctx, 2*time.Minute); err != nil {
		out, _ := n.NodeExec(ctx, "journalctl", "--no-pager", "-n", "60", "-u", "kubelet")
		return fmt.Errorf("%w\nkubelet journal:\n%s", err, out)
	}
	if err := n.installManifests(ctx, false); err != nil {
		return err
	}
	if err := n.waitServiceAccount(ctx); err != nil {
		return err
	}
	return n.fill() // CrishimSock is known only now
}

// launch starts stage1 in new PID, mount, UTS, IPC and network namespaces; it blocks on
// stdin until release. Its output (systemd's console) goes to logs/systemd.log.
func (n *Node) launch(lower string, hs []cgroupHierarchy, binds [][2]string) (pid int, release func() error, err error) {
	logf, err := os.OpenFile(n.l.logFile("systemd"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return 0, nil, err
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	defer pr.Close()
	cmd := exec.Command("/bin/sh", "-c", stage1(stage2(lower, n.l, hs, binds)))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pr, logf, logf
	cmd.Dir = "/"
	// systemd tells it runs in a container from $container, as under Docker or nspawn.
	cmd.Env = []string{"container=crishim-testbed", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET,
	}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return 0, nil, fmt.Errorf("start the node's namespaces: %w", err)
	}
	// Reap it while this process lives; it outlives us otherwise (make node).
	go func() { _ = cmd.Wait() }()
	return cmd.Process.Pid, func() error {
		defer pw.Close()
		_, err := io.WriteString(pw, "go\n")
		return err
	}, nil
}

func moveIntoCgroup(hs []cgroupHierarchy, name string, pid int) error {
	for _, d := range sysnodeCgroupDirs(hs, name) {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("move the node into %s: %w", d, err)
		}
	}
	return nil
}

func addSysnodeBridge(ctx context.Context, i int) error {
	br := sysnodeBridge(i)
	_ = deleteLink(ctx, br)
	for _, args := range [][]string{
		{"link", "add", br, "type", "bridge"},
		{"addr", "add", sysnodeHostIP(i) + "/24", "dev", br},
		{"link", "set", br, "up"},
	} {
		if err := runIP(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// addSysnodeVeth links the node's network namespace (that of pid) to its bridge.
func addSysnodeVeth(ctx context.Context, i, pid int) error {
	veth := sysnodeVeth(i)
	_ = deleteLink(ctx, veth)
	if err := runIP(ctx, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(pid)); err != nil {
		return err
	}
	if err := runIP(ctx, "link", "set", veth, "master", sysnodeBridge(i), "up"); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", sysnodeNodeIP(i) + "/24", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "via", sysnodeHostIP(i)},
	} {
		cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(pid), "-n", "ip"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("in the node: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}

// NodeExec runs a command inside the systemd node (all of its namespaces, its root) and
// returns its combined output.
func (n *Node) NodeExec(ctx context.Context, argv ...string) ([]byte, error) {
	return n.nodeExec(ctx, nil, argv...)
}

// NodeExecStdin is NodeExec with stdin.
func (n *Node) NodeExecStdin(ctx context.Context, stdin []byte, argv ...string) ([]byte, error) {
	return n.nodeExec(ctx, stdin, argv...)
}

func (n *Node) nodeExec(ctx context.Context, stdin []byte, argv ...string) ([]byte, error) {
	if n.s.SystemdPID == 0 {
		return nil, errors.New("not a systemd node")
	}
	args := append([]string{"-t", strconv.Itoa(n.s.SystemdPID), "-m", "-u", "-i", "-n", "-p", "-C", "-r", "-w", "--"}, argv...)
	cmd := exec.CommandContext(ctx, "nsenter", args...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "SYSTEMD_PAGER=", "LANG=C.UTF-8"}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("in the node: %s: %w: %s", strings.Join(argv, " "), err, harness.Tail(out, 3000))
	}
	return out, nil
}

// nodePath is where the host reaches path of the node's file system.
func (n *Node) nodePath(path string) string {
	return filepath.Join("/proc", strconv.Itoa(n.s.SystemdPID), "root", path)
}

// waitSystemRunning waits for `systemctl is-system-running` to answer running; degraded
// fails with the failed units.
func (n *Node) waitSystemRunning(ctx context.Context) error {
	var last string
	err := harness.Poll(ctx, 2*time.Minute, func(ctx context.Context) error {
		out, _ := n.NodeExec(ctx, "systemctl", "is-system-running")
		last = strings.TrimSpace(string(out))
		switch last {
		case "running":
			return nil
		case "degraded":
			return errDegraded
		}
		return fmt.Errorf("systemctl is-system-running: %s", last)
	}, errDegraded)
	if err != nil {
		failed, _ := n.NodeExec(ctx, "systemctl", "--failed", "--no-legend")
		b, _ := os.ReadFile(n.l.logFile("systemd"))
		return fmt.Errorf("the node's systemd: %w (%s); failed units:\n%s\nconsole:\n%s", err, last, failed, harness.Tail(b, 3000))
	}
	return nil
}

var errDegraded = errors.New("degraded")

// SystemState is `systemctl is-system-running` of the node.
func (n *Node) SystemState(ctx context.Context) string {
	out, _ := n.NodeExec(ctx, "systemctl", "is-system-running")
	return strings.TrimSpace(string(out))
}
