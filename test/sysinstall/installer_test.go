package sysinstall

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/crishim/crishim/nodeinstall"
	"github.com/crishim/crishim/test/harness"
	"github.com/crishim/crishim/test/node"
)

const (
	ns              = "crishim-installer"
	crishimEndpoint = "unix:///run/crishim/crishim.sock"
	directEndpoint  = "unix:///run/containerd/containerd.sock"
)

// kubectl runs kubectl against the node's cluster and fails the test on an error.
func kubectl(ctx context.Context, t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	out, err := testNode.Kubectl(ctx, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// manifest is packaging/kubernetes/install/<name> with the image ref and, since the bed runs
// no kube-proxy for the kubernetes Service, the API server's address as the pod's in-cluster
// address (the pod has the node's network).
func manifest(t *testing.T, name, ref string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "packaging/kubernetes/install", name))
	if err != nil {
		t.Fatal(err)
	}
	var ds map[string]any
	if err := yaml.Unmarshal(b, &ds); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(testNode.APIServerURL())
	if err != nil {
		t.Fatal(err)
	}
	spec := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	c := spec["containers"].([]any)[0].(map[string]any)
	c["image"] = ref
	c["env"] = append(c["env"].([]any),
		map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": u.Hostname()},
		map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": u.Port()})
	out, err := yaml.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// podState is what must not change for a pod the installer runs under: its container's ID
// and restart count, and that the runtime still runs that container.
func podState(ctx context.Context, t *testing.T, pod string) string {
	t.Helper()
	s := kubectl(ctx, t, nil, "get", "pod", pod, "-o", "jsonpath={.status.containerStatuses[0].containerID} {.status.containerStatuses[0].restartCount}")
	id, _, _ := strings.Cut(s, " ")
	tasks, err := testNode.NodeExec(ctx, "ctr", "-n", "k8s.io", "tasks", "ls")
	if err != nil {
		t.Fatal(err)
	}
	running := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(strings.TrimPrefix(id, "containerd://")) + `\s+\d+\s+RUNNING$`).Match(tasks)
	return fmt.Sprintf("%s running=%v", s, running)
}

func podStates(ctx context.Context, t *testing.T, pods []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, p := range pods {
		m[p] = podState(ctx, t, p)
	}
	return m
}

func checkPodsKept(ctx context.Context, t *testing.T, when string, before map[string]string) {
	t.Helper()
	for p, b := range before {
		if a := podState(ctx, t, p); a != b {
			t.Errorf("%s: pod %s went from %q to %q (container ID, restarts, running)", when, p, b, a)
		}
	}
}

// kubeletEndpoint is the containerRuntimeEndpoint the running kubelet uses (its configz).
func kubeletEndpoint(ctx context.Context, t *testing.T) string {
	t.Helper()
	out := kubectl(ctx, t, nil, "get", "--raw", "/api/v1/nodes/"+testNode.Name+"/proxy/configz")
	m := regexp.MustCompile(`"containerRuntimeEndpoint":"([^"]*)"`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no containerRuntimeEndpoint in the kubelet's configz:\n%s", out)
	}
	return m[1]
}

// nodeMarks is the node's installer label and taint.
func nodeMarks(ctx context.Context, t *testing.T) (label, taints string) {
	t.Helper()
	out := kubectl(ctx, t, nil, "get", "node", testNode.Name, "-o", `jsonpath={.metadata.labels.crishim\.io/crishim}|{.spec.taints[*].key}`)
	label, taints, _ = strings.Cut(out, "|")
	return label, taints
}

func kubeletPID(ctx context.Context, t *testing.T) string {
	t.Helper()
	out, err := testNode.NodeExec(ctx, "systemctl", "show", "-p", "MainPID", "-p", "NRestarts", "kubelet")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(out)), " ")
}

func crishimVersion(ctx context.Context, t *testing.T) string {
	t.Helper()
	out, err := testNode.NodeExec(ctx, "/usr/local/bin/crishim", "--version")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func dumpInstaller(ctx context.Context, t *testing.T, ds string) {
	t.Helper()
	out, _ := testNode.Kubectl(ctx, nil, "-n", ns, "logs", "ds/"+ds, "--tail=60")
	t.Logf("%s's log:\n%s", ds, out)
}

// TestFleetInstallerRollsBack (first: it leaves the node as it found it): a node whose
// kubeadm-flags.env still names containerd with --container-runtime-endpoint, which makes
// crishim's kubelet drop-in refuse to start the kubelet. The installer's check fails, it
// rolls back: the kubelet is back on containerd and Ready, crishim's files are gone, no
// label, no taint, every pod kept, and the installer's pod stays unready (which would stop a
// rolling update there).
func TestFleetInstallerRollsBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	runPod(ctx, t, "before-rollback")
	before := podStates(ctx, t, []string{"before-rollback"})
	const flags = "/var/lib/kubelet/kubeadm-flags.env"
	orig, err := testNode.NodeExec(ctx, "cat", flags)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testNode.NodeExec(ctx, "sed", "-i", `s|^KUBELET_KUBEADM_ARGS="|&--container-runtime-endpoint=`+directEndpoint+` |`, flags); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := testNode.NodeExecStdin(context.Background(), orig, "sh", "-c", "cat > "+flags); err != nil {
			t.Errorf("restore %s: %v", flags, err)
		}
	}()
	kubectl(ctx, t, nil, "apply", "-f", filepath.Join(repo, "packaging/kubernetes/install/rbac.yaml"))
	kubectl(ctx, t, nil, "label", "--overwrite", "node", testNode.Name, "crishim.io/install=true")
	ds := manifest(t, "installer.yaml", firstRef)
	kubectl(ctx, t, ds, "apply", "-f", "-")
	defer func() {
		_, _ = testNode.Kubectl(context.Background(), ds, "delete", "--wait=true", "-f", "-")
	}()
	var log string
	err = harness.Poll(ctx, 3*time.Minute, func(ctx context.Context) error {
		out, err := testNode.Kubectl(ctx, nil, "-n", ns, "logs", "ds/crishim-node-installer")
		log = string(out)
		if err != nil {
			return err
		}
		if !strings.Contains(log, "the node is as it was before") {
			return errors.New("the installer has not given up yet")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v; its log:\n%s", err, log)
	}
	if !strings.Contains(log, "(rolled back)") || !strings.Contains(log, "kubelet.service") {
		t.Errorf("the installer's log does not tell a rolled back kubelet restart:\n%s", log)
	}
	t.Logf("the installer's failure: %s", grep(log, "rolled back"))
	if err := testNode.WaitReady(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ep := kubeletEndpoint(ctx, t); ep != directEndpoint {
		t.Errorf("after the rollback the kubelet talks to %s, want %s", ep, directEndpoint)
	}
	if l, taints := nodeMarks(ctx, t); l != "" || strings.Contains(taints, nodeinstall.TaintKey) {
		t.Errorf("after the rollback: node label %q, taints %q", l, taints)
	}
	out, err := testNode.NodeExec(ctx, "sh", "-c", `
systemctl is-active crishim.socket crishim || true
for f in /usr/local/bin/crishim /etc/systemd/system/crishim.service /etc/systemd/system/crishim.socket /etc/systemd/system/kubelet.service.d/90-crishim.conf /etc/kubernetes/kubelet.conf.d/90-crishim.conf; do
  test -e $f && echo left: $f
done
true`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(string(out)), " "); got != "inactive inactive" {
		t.Errorf("after the rollback: %q, want crishim inactive and none of the installer's files left", got)
	}
	// Unready: right after the kubelet's restart the kubelet may show the pod Ready (it keeps
	// a container started before it from turning NotReady) until the probe runs again.
	err = harness.Poll(ctx, time.Minute, func(ctx context.Context) error {
		ready, err := podReady(ctx, "crishim-node-installer")
		if err != nil {
			return err
		}
		if ready != "False" {
			return fmt.Errorf("the installer's pod Ready = %q, want False", ready)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	checkPodsKept(ctx, t, "rollback", before)
}

// podReady is the Ready condition of the pods of DaemonSet ds.
func podReady(ctx context.Context, ds string) (string, error) {
	out, err := testNode.Kubectl(ctx, nil, "-n", ns, "get", "pods", "-l", "app.kubernetes.io/name="+ds, "-o", "jsonpath={.items[*].status.conditions[?(@.type=='Ready')].status}")
	return strings.TrimSpace(string(out)), err
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestFleetInstaller: on a node whose pods run straight on containerd, `kubectl apply` of
// packaging/kubernetes/install puts crishim on it and points the kubelet at it (Ready within
// 60 s, every pod kept); a second image rolls out (crishim upgraded, the kubelet not
// restarted); the uninstaller points the kubelet back at containerd and removes crishim,
// again with every pod kept.
func TestFleetInstaller(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if ep := kubeletEndpoint(ctx, t); ep != directEndpoint {
		t.Fatalf("the node's kubelet talks to %s, want %s (straight on containerd)", ep, directEndpoint)
	}
	pods := []string{"before-install-a", "before-install-b"}
	for _, p := range pods {
		runPod(ctx, t, p)
	}
	before := podStates(ctx, t, pods)
	for p, s := range before {
		if !strings.HasSuffix(s, " 0 running=true") {
			t.Fatalf("pod %s: %s, want a running container never restarted", p, s)
		}
	}

	// Install.
	kubectl(ctx, t, nil, "apply", "-f", filepath.Join(repo, "packaging/kubernetes/install/rbac.yaml"))
	t.Cleanup(func() {
		// Waits: a test after this one applies it again, which a terminating namespace refuses.
		_, _ = testNode.Kubectl(context.Background(), nil, "delete", "--ignore-not-found", "--wait=true", "--timeout=120s", "-f", filepath.Join(repo, "packaging/kubernetes/install/rbac.yaml"))
	})
	kubectl(ctx, t, nil, "label", "--overwrite", "node", testNode.Name, "crishim.io/install=true")
	start := time.Now()
	kubectl(ctx, t, manifest(t, "installer.yaml", firstRef), "apply", "-f", "-")
	err := harness.Poll(ctx, 60*time.Second, func(ctx context.Context) error {
		if l, taints := nodeMarks(ctx, t); l != nodeinstall.LabelInstalled || strings.Contains(taints, nodeinstall.TaintKey) {
			return fmt.Errorf("node label %q, taints %q", l, taints)
		}
		return nil
	})
	if err != nil {
		dumpInstaller(ctx, t, "crishim-node-installer")
		t.Fatalf("the node is not labelled installed within 60 s of kubectl apply: %v", err)
	}
	if err := testNode.WaitReady(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	installed := time.Since(start)
	t.Logf("kubectl apply to the node Ready on crishim and labelled: %s", installed.Round(time.Millisecond))
	fmt.Printf("sysinstall: installed in %s (kubectl apply to the node Ready, labelled, untainted)\n", installed.Round(time.Millisecond))
	kubectl(ctx, t, nil, "-n", ns, "rollout", "status", "ds/crishim-node-installer", "--timeout=60s")
	if ep := kubeletEndpoint(ctx, t); ep != crishimEndpoint {
		t.Errorf("after the install the kubelet talks to %s, want %s", ep, crishimEndpoint)
	}
	if v := crishimVersion(ctx, t); !strings.Contains(v, firstVersion) {
		t.Errorf("crishim --version on the node: %q, want %s", v, firstVersion)
	}
	checkPodsKept(ctx, t, "install", before)
	runPod(ctx, t, "after-install") // the kubelet runs a new pod through crishim

	// A newer build rolls out: crishim upgraded under its socket, the kubelet left running.
	kubeletBefore := kubeletPID(ctx, t)
	start = time.Now()
	kubectl(ctx, t, nil, "-n", ns, "set", "image", "ds/crishim-node-installer", "installer="+secondRef)
	if _, err := testNode.Kubectl(ctx, nil, "-n", ns, "rollout", "status", "ds/crishim-node-installer", "--timeout=120s"); err != nil {
		dumpInstaller(ctx, t, "crishim-node-installer")
		t.Fatal(err)
	}
	fmt.Printf("sysinstall: rolled out %s in %s\n", secondVersion, time.Since(start).Round(time.Millisecond))
	if v := crishimVersion(ctx, t); !strings.Contains(v, secondVersion) {
		t.Errorf("after the rollout crishim --version on the node: %q, want %s", v, secondVersion)
	}
	err = harness.Poll(ctx, time.Minute, func(ctx context.Context) error {
		out, err := testNode.NodeExec(ctx, "journalctl", "--no-pager", "-u", "crishim", "-g", "crishim serving")
		if err != nil {
			return err
		}
		if !strings.Contains(string(out), "version="+secondVersion) {
			return fmt.Errorf("the new crishim does not serve yet:\n%s", out)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if after := kubeletPID(ctx, t); after != kubeletBefore {
		t.Errorf("the rollout restarted the kubelet: %s, then %s", kubeletBefore, after)
	}
	if l, _ := nodeMarks(ctx, t); l != nodeinstall.LabelInstalled {
		t.Errorf("after the rollout the node's label is %q", l)
	}
	checkPodsKept(ctx, t, "rollout", before)

	// Uninstall: the installer deleted (nothing happens on the node), the uninstaller applied.
	kubectl(ctx, t, manifest(t, "installer.yaml", secondRef), "delete", "--wait=true", "-f", "-")
	start = time.Now()
	kubectl(ctx, t, manifest(t, "uninstall/uninstaller.yaml", secondRef), "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = testNode.Kubectl(context.Background(), manifest(t, "uninstall/uninstaller.yaml", secondRef), "delete", "--ignore-not-found", "-f", "-")
	})
	// Done when it says so (its pod may look Ready early: see TestFleetInstallerRollsBack).
	err = harness.Poll(ctx, 2*time.Minute, func(ctx context.Context) error {
		out, err := testNode.Kubectl(ctx, nil, "-n", ns, "logs", "ds/crishim-node-uninstaller")
		if err != nil {
			return err
		}
		if !strings.Contains(string(out), "done; waiting to be stopped") {
			return errors.New("the uninstaller is not done")
		}
		return nil
	})
	if err != nil {
		dumpInstaller(ctx, t, "crishim-node-uninstaller")
		t.Fatal(err)
	}
	fmt.Printf("sysinstall: uninstalled in %s\n", time.Since(start).Round(time.Millisecond))
	if l, taints := nodeMarks(ctx, t); l != "" || strings.Contains(taints, nodeinstall.TaintKey) {
		t.Errorf("after the uninstall: node label %q, taints %q", l, taints)
	}
	if ep := kubeletEndpoint(ctx, t); ep != directEndpoint {
		t.Errorf("after the uninstall the kubelet talks to %s, want %s", ep, directEndpoint)
	}
	out, err := testNode.NodeExec(ctx, "sh", "-c", `
systemctl is-active crishim.socket crishim || true
for f in /usr/local/bin/crishim /usr/local/bin/crishimctl /etc/systemd/system/crishim.service /etc/systemd/system/crishim.socket /etc/systemd/system/kubelet.service.d/90-crishim.conf /etc/kubernetes/kubelet.conf.d/90-crishim.conf /etc/systemd/system/sockets.target.wants/crishim.socket /etc/systemd/system/multi-user.target.wants/crishim.service; do
  test -e $f && echo left: $f
done
true`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(string(out)), " "); got != "inactive inactive" {
		t.Errorf("after the uninstall: %q, want crishim.socket and crishim inactive and none of their files left", got)
	}
	checkPodsKept(ctx, t, "uninstall", before)
	runPod(ctx, t, "after-uninstall") // the kubelet runs a new pod straight on containerd
}

// runPod runs a busybox pod that sleeps and waits until it is Ready.
func runPod(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    imagePullPolicy: IfNotPresent
    command: ["sleep", "3600"]
`, name, node.BusyboxLatest)
	kubectl(ctx, t, []byte(pod), "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = testNode.Kubectl(context.Background(), nil, "delete", "pod", name, "--wait=false")
	})
	if _, err := testNode.Kubectl(ctx, nil, "wait", "--for=condition=Ready", "pod/"+name, "--timeout=120s"); err != nil {
		out, _ := testNode.Kubectl(ctx, nil, "describe", "pod", name)
		t.Fatalf("%v\n%s", err, out)
	}
}
