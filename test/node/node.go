package node

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/crishim/crishim/test/crishimproc"
	"github.com/crishim/crishim/test/harness"
)

// BusyboxLatest is the name under which the bed's offline busybox (every applet: httpd, nc,
// ps...) is present on the node, so pods that use it with imagePullPolicy IfNotPresent start.
const BusyboxLatest = "docker.io/library/busybox:latest"

// Options say which node to run and with which crishim.
type Options struct {
	// Index picks the node's directory, interface, address and cgroup; `make node` uses 0,
	// the e2e tests 1, so both can run at once.
	Index       int
	Crishim     string   // the crishim binary
	CrishimArgs []string // extra crishim flags
	Log         *slog.Logger
	// Runtime runs behind crishim; empty means harness.RuntimeFromEnv(). A running node of
	// another runtime is not reused but replaced.
	Runtime harness.Runtime
	// APIServerArgs are extra kube-apiserver flags, after the bed's own (a repeated flag's
	// last value wins): test/scale turns on --profiling to take the apiserver's pprof.
	APIServerArgs []string
}

// Node is a running one-node cluster.
type Node struct {
	Dir            string          // everything of the node lives under it
	Name           string          // the Node object's name
	IP             string          // the node IP, on the bed's dummy interface
	Kubeconfig     string          // admin kubeconfig
	CrishimSock    string          // the socket the kubelet talks to
	CrishimMetrics string          // http://host:port of crishim's /metrics
	Version        string          // the Kubernetes release
	Runtime        harness.Runtime // the runtime behind crishim
	Clientset      *kubernetes.Clientset
	Reused         bool // Up found it running

	l    layout
	s    state
	bins Binaries
	cd   *harness.Containerd // nil for a node reused from another process
	opts Options
	log  *slog.Logger
	pki  pki
	// controllerImage is the notification controller's image archive, built by Start.
	controllerImage []byte
}

// Dir is node index's directory.
func Dir(index int) string { return filepath.Join(harness.BaseDir, "node-"+strconv.Itoa(index)) }

// startTimeout bounds a whole start once the binaries are built.
const startTimeout = 4 * time.Minute

// Up returns the node at opts.Index if it is running and Ready (the second `make node`),
// and otherwise starts it afresh, sweeping whatever an earlier run left.
func Up(ctx context.Context, opts Options) (*Node, error) {
	if err := resolveRuntime(&opts); err != nil {
		return nil, err
	}
	if n, err := reuse(ctx, opts); err == nil {
		return n, nil
	}
	return Start(ctx, opts)
}

// reuse attaches to a running node.
func reuse(ctx context.Context, opts Options) (*Node, error) {
	l := layout{Dir(opts.Index)}
	s, err := readState(l)
	if err != nil {
		return nil, err
	}
	if s.runtime() != opts.Runtime {
		return nil, fmt.Errorf("node runs %s, not %s", s.runtime(), opts.Runtime)
	}
	if !running(l, "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "crishim") {
		return nil, errors.New("not every component runs")
	}
	n := &Node{l: l, s: s, opts: opts, log: logger(opts), bins: Binaries{Dir: s.Bins, Version: s.Version}, pki: pki{dir: l.path("pki")}, Reused: true}
	if err := n.fill(); err != nil {
		return nil, err
	}
	if err := n.WaitReady(ctx, 10*time.Second); err != nil {
		return nil, err
	}
	return n, nil
}

// resolveRuntime fills opts.Runtime from $RUNTIME when it is empty.
func resolveRuntime(opts *Options) error {
	if opts.Runtime != "" {
		return nil
	}
	r, err := harness.RuntimeFromEnv()
	opts.Runtime = r
	return err
}

func logger(opts Options) *slog.Logger {
	if opts.Log != nil {
		return opts.Log
	}
	return slog.New(slog.DiscardHandler)
}

// Start builds (or finds cached) binaries, sweeps node opts.Index, and brings everything
// up: containerd, crishim, etcd, apiserver, controller-manager, scheduler, kubelet. It
// returns once the node is Ready and the default service account exists.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if err := resolveRuntime(&opts); err != nil {
		return nil, err
	}
	log := logger(opts)
	bins, err := EnsureBinaries(ctx, log)
	if err != nil {
		return nil, err
	}
	// Like the Kubernetes binaries, a runtime build is outside startTimeout.
	if err := harness.Prepare(ctx, opts.Runtime); err != nil {
		return nil, err
	}
	// So is the build of the notification controller's image (the first one is long).
	log.Info("building the notification controller's image", "image", harness.NotificationControllerImage)
	image, err := controllerImage(ctx)
	if err != nil {
		return nil, err
	}
	l := layout{Dir(opts.Index)}
	if err := Clean(opts.Index); err != nil {
		return nil, fmt.Errorf("sweep node %d: %w", opts.Index, err)
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	n := &Node{l: l, opts: opts, log: log, bins: bins, controllerImage: image}
	if err := n.start(ctx); err != nil {
		return nil, fmt.Errorf("start node %d: %w", opts.Index, err)
	}
	return n, nil
}

func (n *Node) start(ctx context.Context) error {
	l := n.l
	for _, d := range []string{l.dir, l.path("logs"), l.path("pod-logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	n.s = state{
		Index:              n.opts.Index,
		Name:               "crishim-node-" + strconv.Itoa(n.opts.Index),
		NodeIP:             nodeIP(n.opts.Index),
		Iface:              nodeIface(n.opts.Index),
		CgroupRoot:         "/crishim-node-" + strconv.Itoa(n.opts.Index),
		CrishimSock:        l.hostPath(n.bins)(crishimSocket),
		CrishimMetrics:     "127.0.0.1:" + strconv.Itoa(ports[0]),
		CrishimArgs:        n.opts.CrishimArgs,
		EtcdAddr:           "127.0.0.1:" + strconv.Itoa(ports[1]),
		EtcdPeerAddr:       "127.0.0.1:" + strconv.Itoa(ports[2]),
		APIServerPort:      ports[3],
		KubeletPort:        ports[4],
		KubeletHealthzPort: ports[5],
		Kubeconfig:         l.path("admin.kubeconfig"),
		Version:            n.bins.Version,
		Bins:               n.bins.Dir,
	}
	// Record the names first: a start that fails half-way is swept by them.
	if err := writeState(l, n.s); err != nil {
		return err
	}
	if err := addNodeIface(ctx, n.s.Iface, n.s.NodeIP); err != nil {
		return err
	}
	if err := createCgroupRoot(n.s.CgroupRoot); err != nil {
		return err
	}

	n.log.Info("starting the private containerd")
	cd, err := harness.Start(ctx, harness.Options{Detach: true, Owner: l.dir, Runtime: n.opts.Runtime})
	if err != nil {
		return err
	}
	n.cd, n.s.SlotDir, n.s.ContainerdEndpoint = cd, cd.Dir, cd.Endpoint
	n.s.Runtime, n.s.ContainerdAddress = cd.Runtime, cd.ContainerdAddress
	n.log.Info("runtime", "runtime", cd.Runtime, "name", cd.RuntimeName, "version", cd.RuntimeVersion)
	if err := writeState(l, n.s); err != nil {
		return err
	}
	if err := n.tagBusybox(ctx); err != nil {
		return err
	}
	if err := n.writePKI(); err != nil {
		return err
	}
	n.log.Info("starting crishim", "socket", n.s.CrishimSock)
	if err := n.startCrishim(); err != nil {
		return err
	}
	if err := os.WriteFile(l.path("resolv.conf"), []byte("# no DNS on the test node\n"), 0o644); err != nil {
		return err
	}
	if err := n.writeKubeadmNode(); err != nil {
		return err
	}
	if err := n.installCrishimKubeletFiles(); err != nil {
		return err
	}

	n.log.Info("starting etcd and kube-apiserver")
	if _, err := startDaemon(l, n.bins.Path("etcd"), etcdArgs(l, n.s)); err != nil {
		return err
	}
	if err := waitTCP(ctx, n.s.EtcdAddr); err != nil {
		return fmt.Errorf("etcd: %w\n%s", err, logTail(l, "etcd"))
	}
	apiserver, err := startDaemon(l, n.bins.Path("kube-apiserver"), apiserverArgs(l, n.s, n.pki))
	if err != nil {
		return err
	}
	if err := n.fill(); err != nil {
		return err
	}
	if err := n.waitAPIServer(ctx, apiserver); err != nil {
		return err
	}
	n.log.Info("starting kube-controller-manager, kube-scheduler and kubelet")
	if _, err := startDaemon(l, n.bins.Path("kube-controller-manager"), controllerManagerArgs(l, n.pki)); err != nil {
		return err
	}
	if _, err := startDaemon(l, n.bins.Path("kube-scheduler"), schedulerArgs(l)); err != nil {
		return err
	}
	kubelet, err := n.startKubelet(ctx)
	if err != nil {
		return err
	}
	if err := n.waitKubeletHealthy(ctx, kubelet); err != nil {
		return err
	}
	if err := n.WaitReady(ctx, 2*time.Minute); err != nil {
		return err
	}
	if err := n.waitServiceAccount(ctx); err != nil {
		return err
	}
	return n.installManifests(ctx, true)
}

// fill derives the exported fields and the client from the state.
func (n *Node) fill() error {
	n.Dir, n.Name, n.IP, n.Kubeconfig = n.l.dir, n.s.Name, n.s.NodeIP, n.s.Kubeconfig
	n.CrishimSock, n.CrishimMetrics, n.Version = n.s.CrishimSock, "http://"+n.s.CrishimMetrics, n.s.Version
	n.Runtime = n.s.runtime()
	cfg, err := clientcmd.BuildConfigFromFlags("", n.Kubeconfig)
	if err != nil {
		return fmt.Errorf("load %s: %w", n.Kubeconfig, err)
	}
	n.Clientset, err = kubernetes.NewForConfig(cfg)
	return err
}

func (n *Node) writePKI() error {
	server := "https://127.0.0.1:" + strconv.Itoa(n.s.APIServerPort)
	kp, err := n.issuePKI(server, net.ParseIP(n.s.NodeIP))
	if err != nil {
		return err
	}
	path := n.l.hostPath(n.bins)(kubeletKubeconfig)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return n.pki.kubeconfig(path, server, kp)
}

// issuePKI makes the node's CA and issues from it: the apiserver's serving certificate
// (for loopback, apiserverIPs, the service IP and the in-cluster names), its client
// certificate to the kubelet, the service-account keys, the kubeconfigs of the host's
// clients for server, and the kubelet's client key pair, which it returns for the caller
// to put where its kubelet reads it.
func (n *Node) issuePKI(server string, apiserverIPs ...net.IP) (kubelet keyPair, err error) {
	p, err := newPKI(n.l.path("pki"))
	if err != nil {
		return keyPair{}, err
	}
	n.pki = p
	ips := append(append([]net.IP{net.ParseIP("127.0.0.1")}, apiserverIPs...), net.ParseIP("10.96.0.1"))
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if _, err := p.issue("apiserver", "kube-apiserver", nil, ips, dns); err != nil {
		return keyPair{}, err
	}
	if _, err := p.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil); err != nil {
		return keyPair{}, err
	}
	if _, err := p.serviceAccountKeys(); err != nil {
		return keyPair{}, err
	}
	// Each client authenticates as the user the default RBAC policy expects of it.
	for _, c := range []struct{ file, cn, group string }{
		{"admin", "crishim-node-admin", "system:masters"},
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
	} {
		var groups []string
		if c.group != "" {
			groups = []string{c.group}
		}
		kp, err := p.issue(c.file, c.cn, groups, nil, nil)
		if err != nil {
			return keyPair{}, err
		}
		if err := p.kubeconfig(n.l.path(c.file+".kubeconfig"), server, kp); err != nil {
			return keyPair{}, err
		}
	}
	return p.issue("kubelet", "system:node:"+n.s.Name, []string{"system:nodes"}, nil, nil)
}

// tagBusybox gives the bed's busybox the name pods ask for.
func (n *Node) tagBusybox(ctx context.Context) error {
	return n.cd.TagImage(ctx, n.cd.BusyboxImage, BusyboxLatest)
}

func (n *Node) startCrishim() error {
	// crishim uses the kubelet's identity for Notifications (the shipped RBAC binds
	// system:nodes), as docs/notifications.md tells operators to.
	args := append([]string{
		// From the state, not n.cd: a reused node (another process started it) has none.
		"--containerd-address", n.s.containerdAddress(),
		"--metrics-address", n.s.CrishimMetrics,
		"--kubeconfig", n.l.hostPath(n.bins)(kubeletKubeconfig),
		"--node-name", n.s.Name,
	}, n.s.CrishimArgs...)
	_, err := crishimproc.Start(crishimproc.Options{
		Binary:          n.opts.Crishim,
		Socket:          n.s.CrishimSock,
		RuntimeEndpoint: n.s.ContainerdEndpoint,
		LogPath:         n.l.logFile("crishim"),
		Args:            args,
		Detach:          true,
	})
	return err
}

// waitAPIServer waits for /readyz, which needs no credentials by default
// (system:public-info-viewer).
func (n *Node) waitAPIServer(ctx context.Context, exited <-chan struct{}) error {
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	url := "https://127.0.0.1:" + strconv.Itoa(n.s.APIServerPort) + "/readyz"
	return n.waitHTTPOK(ctx, client, url, exited, "kube-apiserver")
}

// waitHTTPOK polls url until it answers 200, giving up early if the component started by
// this process (exited) ends; a failure quotes the component's log.
func (n *Node) waitHTTPOK(ctx context.Context, client *http.Client, url string, exited <-chan struct{}, component string) error {
	err := harness.Poll(ctx, 2*time.Minute, func(ctx context.Context) error {
		if hasExited(exited) {
			return errExited
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}, errExited)
	if err != nil {
		return fmt.Errorf("%s: %w\n%s log:\n%s", component, err, component, logTail(n.l, component))
	}
	return nil
}

// WaitReady waits until the Node object says Ready.
func (n *Node) WaitReady(ctx context.Context, timeout time.Duration) error {
	err := harness.Poll(ctx, timeout, func(ctx context.Context) error {
		node, err := n.Clientset.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s Ready=%s: %s", n.Name, c.Status, c.Message)
			}
		}
		return fmt.Errorf("node %s has no Ready condition yet", n.Name)
	})
	if err != nil {
		return fmt.Errorf("%w\nkubelet log:\n%s", err, logTail(n.l, "kubelet"))
	}
	return nil
}

// waitServiceAccount waits for the controller-manager to create the default service
// account, without which the apiserver admits no pod.
func (n *Node) waitServiceAccount(ctx context.Context) error {
	err := harness.Poll(ctx, time.Minute, func(ctx context.Context) error {
		_, err := n.Clientset.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return errors.New("no default service account yet")
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("%w\ncontroller-manager log:\n%s", err, logTail(n.l, "kube-controller-manager"))
	}
	return nil
}

// Kubectl runs kubectl against the node and returns its stdout; on failure the error holds
// stderr.
func (n *Node) Kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, n.bins.Path("kubectl"), append([]string{"--kubeconfig", n.Kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("kubectl %v: %w: %s", args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// KubectlPath is the kubectl binary, for tests that drive it themselves.
func (n *Node) KubectlPath() string { return n.bins.Path("kubectl") }

// Lines are what `make node` prints: how other tools find the node.
func (n *Node) Lines() []string {
	return []string{"KUBECONFIG=" + n.Kubeconfig, "CRISHIM_SOCK=" + n.CrishimSock, "CRISHIM_METRICS=" + n.CrishimMetrics}
}

// Stop tears the node down; see Clean and CleanSystemd.
func (n *Node) Stop() error {
	if n.s.Systemd {
		return CleanSystemd(n.s.Index)
	}
	return Clean(n.s.Index)
}

// Clean tears node index down, whoever started it: the kubelet first (so it recreates
// nothing), the control plane and crishim, then the private containerd with its pods
// (harness teardown), the kubelet's mounts and cgroups, the dummy interface and the files.
// A node that is not there is no error.
func Clean(index int) error {
	l := layout{Dir(index)}
	s, serr := readState(l)
	if serr != nil && !errors.Is(serr, os.ErrNotExist) {
		// Unreadable state: sweep what can be found by the directory alone.
		s = state{Index: index}
	}
	if s.Iface == "" {
		s.Iface, s.CgroupRoot = nodeIface(index), "/crishim-node-"+strconv.Itoa(index)
	}
	var errs []error
	if err := stopDaemons(l, "kubelet", 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := stopDaemons(l, "", 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	if s.SlotDir != "" {
		if _, err := os.Stat(s.SlotDir); err == nil {
			if err := harness.Teardown(s.SlotDir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := harness.UnmountUnder(l.dir); err != nil {
		errs = append(errs, err)
	}
	if err := removeLogLinks(l.path("pod-logs")); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroupTree(s.CgroupRoot); err != nil {
		errs = append(errs, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := deleteLink(ctx, s.Iface); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(l.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// containerLogLinks is where the kubelet links every container's log, whatever its
// podLogsDir; the links of a node's pods would dangle once the node is gone.
const containerLogLinks = "/var/log/containers"

func removeLogLinks(podLogs string) error {
	entries, err := os.ReadDir(containerLogLinks)
	if err != nil {
		return nil // no links at all
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(containerLogLinks, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, podLogs+"/") {
			// ENOENT: a kubelet still running removed it meanwhile (its own cleanup).
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func waitTCP(ctx context.Context, addr string) error {
	return harness.Poll(ctx, 30*time.Second, func(ctx context.Context) error {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// freePorts asks the kernel for n free loopback ports. They are free when returned; the
// components bind them moments later, which is good enough for a test bed of its own.
func freePorts(k int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range k {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ClientKubeconfig writes a kubeconfig for another client of the node's apiserver,
// authenticated as user cn in groups, and returns its path.
func (n *Node) ClientKubeconfig(name, cn string, groups ...string) (string, error) {
	kp, err := n.pki.issue(name, cn, groups, nil, nil)
	if err != nil {
		return "", err
	}
	path := n.l.path(name + ".kubeconfig")
	return path, n.pki.kubeconfig(path, "https://127.0.0.1:"+strconv.Itoa(n.s.APIServerPort), kp)
}
