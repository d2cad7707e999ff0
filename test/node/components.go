package node

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// featureGates the node turns on in the apiserver and the kubelet: lifecycle.stopSignal is
// still alpha in the release the bed builds, and crishim's stop_signal emulation is what
// the tests prove through it. The kubelet also gets CRIListStreaming (alpha, KEP-5825):
// its lists then use the server-streaming Stream* calls, which crishim must relay, and fall
// back to the unary ones on a runtime without them.
const featureGates = "ContainerStopSignals=true"

// serviceCIDR is the apiserver's service range; nothing routes to it, the apiserver only
// needs one to hand out the kubernetes service's address.
const serviceCIDR = "10.96.0.0/24"

func etcdArgs(l layout, s state) []string {
	return []string{
		"--data-dir", l.path("etcd"),
		"--listen-client-url", "http://" + s.EtcdAddr,
		"--listen-peer-url", "http://" + s.EtcdPeerAddr,
	}
}

// apiserverArgs: loopback only; the advertised address (the kubernetes service's endpoint)
// is the node IP because the apiserver refuses to advertise loopback.
func apiserverArgs(l layout, s state, p pki) []string {
	return []string{
		"--etcd-servers", "http://" + s.EtcdAddr,
		"--bind-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(s.APIServerPort),
		"--advertise-address", s.NodeIP,
		"--cert-dir", l.path("apiserver-certs"),
		"--tls-cert-file", p.path("apiserver.crt"),
		"--tls-private-key-file", p.path("apiserver.key"),
		"--client-ca-file", p.CA(),
		// The node IP only: the default tries the node's hostname first, which would send a
		// DNS query off the machine.
		"--kubelet-preferred-address-types", "InternalIP",
		"--kubelet-client-certificate", p.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key", p.path("apiserver-kubelet-client.key"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", p.path("sa.pub"),
		"--service-account-signing-key-file", p.path("sa.key"),
		"--service-cluster-ip-range", serviceCIDR,
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		"--allow-privileged",
		"--feature-gates", featureGates,
		"--profiling=false",
	}
}

func controllerManagerArgs(l layout, p pki) []string {
	return []string{
		"--kubeconfig", l.path("controller-manager.kubeconfig"),
		"--bind-address", "127.0.0.1",
		"--secure-port", "0",
		"--leader-elect=false",
		// Each controller acts as its own service account, with the roles the default RBAC
		// policy gives it (as kubeadm runs it); the controller-manager's own user may only
		// mint their tokens.
		"--use-service-account-credentials",
		"--service-account-private-key-file", p.path("sa.key"),
		"--root-ca-file", p.CA(),
		"--cluster-name", "crishim-node",
		"--profiling=false",
	}
}

func schedulerArgs(l layout) []string {
	return []string{
		"--kubeconfig", l.path("scheduler.kubeconfig"),
		"--bind-address", "127.0.0.1",
		"--secure-port", "0",
		"--leader-elect=false",
		"--profiling=false",
	}
}

// kubeletConfig renders the KubeletConfiguration kubeadm writes to /var/lib/kubelet/config.yaml.
// The non-default values and why:
//   - containerRuntimeEndpoint: containerd's, kubeadm's criSocket; crishim's drop-in in
//     /etc/kubernetes/kubelet.conf.d overrides it.
//   - cgroupDriver cgroupfs under the node's own cgroupRoot: no systemd here, and two nodes
//     (make node and a test run) must not share /kubepods. A runtime that answers the CRI
//     RuntimeConfig call (containerd 2.x, through crishim) tells the kubelet its driver
//     itself, and the kubelet then ignores this; containerd 1.6 does not, so it stays.
//   - failCgroupV1 false: test machines may still be on cgroup v1.
//   - address and ports: the node IP and free ports, so beds never collide.
//   - podLogsDir: under the bed, not /var/log/pods.
//   - eviction at tiny thresholds: a nearly full test disk must not evict the pods under test.
func kubeletConfig(l layout, s state, p pki, endpoint string) string {
	return kubeletValues{
		endpoint: endpoint, cgroupRoot: s.CgroupRoot,
		address: s.NodeIP, port: s.KubeletPort, healthzPort: s.KubeletHealthzPort,
		clientCA: p.CA(), podLogsDir: l.path("pod-logs"), resolvConf: l.path("resolv.conf"),
		gates: []string{"ContainerStopSignals", "CRIListStreaming"},
	}.render()
}

// kubeletValues are what differs between the nodes' KubeletConfigurations; the empty
// ones are left out, to the kubelet's defaults.
type kubeletValues struct {
	endpoint, cgroupRoot             string
	address                          string
	port, healthzPort                int
	clientCA, podLogsDir, resolvConf string
	gates                            []string // feature gates turned on
}

// render is the KubeletConfiguration of v, with what every node of the bed shares: the
// cgroupfs driver, webhook authentication and authorization, parallel image pulls, no
// image GC and tiny eviction thresholds.
func (v kubeletValues) render() string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("apiVersion: kubelet.config.k8s.io/v1beta1")
	line("kind: KubeletConfiguration")
	line("containerRuntimeEndpoint: %s", v.endpoint)
	line("cgroupDriver: cgroupfs")
	if v.cgroupRoot != "" {
		line("cgroupRoot: %s", v.cgroupRoot)
	}
	line("failCgroupV1: false")
	line("failSwapOn: false")
	if v.address != "" {
		line("address: %s", v.address)
		line("port: %d", v.port)
	}
	line("readOnlyPort: 0")
	if v.healthzPort != 0 {
		line("healthzBindAddress: 127.0.0.1")
		line("healthzPort: %d", v.healthzPort)
	}
	b.WriteString(`authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
`)
	line("    clientCAFile: %s", v.clientCA)
	line("authorization:")
	line("  mode: Webhook")
	if v.podLogsDir != "" {
		line("podLogsDir: %s", v.podLogsDir)
	}
	line("resolvConf: %s", v.resolvConf)
	b.WriteString(`serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
featureGates:
`)
	for _, g := range v.gates {
		line("  %s: true", g)
	}
	return b.String()
}

// layout names the files of a node under its directory.
type layout struct{ dir string }

func (l layout) path(parts ...string) string {
	return filepath.Join(append([]string{l.dir}, parts...)...)
}

func (l layout) logFile(component string) string {
	return l.path("logs", strings.TrimSuffix(component, ".log")+".log")
}
