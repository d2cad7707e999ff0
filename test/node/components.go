package node

import (
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
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
		Endpoint: endpoint, CgroupRoot: s.CgroupRoot,
		Address: s.NodeIP, Port: s.KubeletPort, HealthzPort: s.KubeletHealthzPort,
		ClientCA: p.CA(), PodLogsDir: l.path("pod-logs"), ResolvConf: l.path("resolv.conf"),
		Gates: []string{"ContainerStopSignals", "CRIListStreaming"},
	}.render()
}

// kubeletValues are what differs between the nodes' KubeletConfigurations; the empty
// ones are left out, to the kubelet's defaults.
type kubeletValues struct {
	Endpoint, CgroupRoot, Address    string
	Port, HealthzPort                int
	ClientCA, PodLogsDir, ResolvConf string
	Gates                            []string // feature gates turned on
}

// kubeletConfigTemplate holds what every node of the bed shares: the cgroupfs driver,
// webhook authentication and authorization, parallel image pulls, no image GC and tiny
// eviction thresholds.
var kubeletConfigTemplate = template.Must(template.New("kubelet").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: {{.Endpoint}}
cgroupDriver: cgroupfs
{{with .CgroupRoot}}cgroupRoot: {{.}}
{{end -}}
failCgroupV1: false
failSwapOn: false
{{with .Address}}address: {{.}}
port: {{$.Port}}
{{end -}}
readOnlyPort: 0
{{with .HealthzPort}}healthzBindAddress: 127.0.0.1
healthzPort: {{.}}
{{end -}}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {{.ClientCA}}
authorization:
  mode: Webhook
{{with .PodLogsDir}}podLogsDir: {{.}}
{{end -}}
resolvConf: {{.ResolvConf}}
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "50Mi"
  nodefs.available: "1%"
  imagefs.available: "1%"
featureGates:
{{range .Gates}}  {{.}}: true
{{end}}`))

// render is v's KubeletConfiguration.
func (v kubeletValues) render() string {
	var b strings.Builder
	if err := kubeletConfigTemplate.Execute(&b, v); err != nil {
		panic(err) // the template and its values are this file's: a bug here, not input
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
