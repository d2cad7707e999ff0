package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crishim/crishim/test/systemdunit"
)

// testNode is the state the unit tests render kubeadm's files for.
var testNodeState = state{Name: "crishim-node-9", NodeIP: "10.0.0.9"}

// kubeadmRoot writes a kubeadm node with crishim's kubelet files installed under a temporary
// root and returns its path mapping.
func kubeadmRoot(t *testing.T) func(string) string {
	t.Helper()
	l := layout{t.TempDir()}
	hostPath := l.hostPath(Binaries{Dir: "/opt/kube-bin"})
	if err := writeKubeadmNode(hostPath, testNodeState, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"); err != nil {
		t.Fatal(err)
	}
	if err := installCrishimKubeletFiles(hostPath); err != nil {
		t.Fatal(err)
	}
	return hostPath
}

// TestKubeletStartOnKubeadmNode: on a kubeadm node whose /etc/default/kubelet and
// kubeadm-flags.env set their variables, crishim's drop-in still gets its directory of
// KubeletConfiguration drop-ins on the kubelet's command line, orders the kubelet after
// crishim, and its check lets the kubelet start.
func TestKubeletStartOnKubeadmNode(t *testing.T) {
	hostPath := kubeadmRoot(t)
	unit, st, err := kubeletStart(hostPath)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"/opt/kube-bin/kubelet",
		"--bootstrap-kubeconfig=" + hostPath("/etc/kubernetes/bootstrap-kubelet.conf"),
		"--kubeconfig=" + hostPath("/etc/kubernetes/kubelet.conf"),
		"--config=" + hostPath("/var/lib/kubelet/config.yaml"),
		"--config-dir=" + hostPath("/etc/kubernetes/kubelet.conf.d"),
		"--hostname-override=crishim-node-9",
		"--node-ip=10.0.0.9",
		"--root-dir=" + hostPath("/var/lib/kubelet"),
		"--cert-dir=" + hostPath("/var/lib/kubelet/pki"),
		"--v=2",
	}
	if !slices.Equal(st.ExecStart.Argv, want) {
		t.Errorf("kubelet command line\n %q\nwant\n %q", st.ExecStart.Argv, want)
	}
	if !slices.Contains(unit.Wants, "crishim.service") || !slices.Contains(unit.After, "crishim.service") {
		t.Errorf("kubelet.service Wants=%q After=%q, want crishim.service in both", unit.Wants, unit.After)
	}
	if err := runExecStartPre(context.Background(), st); err != nil {
		t.Errorf("crishim's check refuses a kubeadm node without endpoint flags: %v", err)
	}
	fragment, err := os.ReadFile(hostPath("/etc/kubernetes/kubelet.conf.d/90-crishim.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"containerRuntimeEndpoint", "imageServiceEndpoint"} {
		if line := key + ": unix://" + hostPath("/run/crishim/crishim.sock"); !strings.Contains(string(fragment), line) {
			t.Errorf("the kubelet's drop-in lacks %q:\n%s", line, fragment)
		}
	}
}

// TestOldDropInLostToKubeadm keeps the reason for crishim's drop-in: the one it replaced
// set KUBELET_EXTRA_ARGS with Environment=, and kubeadm's EnvironmentFile=/etc/default/kubelet
// overrides that, so the kubelet never heard of crishim.
func TestOldDropInLostToKubeadm(t *testing.T) {
	hostPath := kubeadmRoot(t)
	for _, f := range crishimKubeletFiles {
		if err := os.Remove(hostPath(f.dst)); err != nil {
			t.Fatal(err)
		}
	}
	old := "[Unit]\nWants=crishim.service\nAfter=crishim.service\n\n[Service]\nEnvironment=\"KUBELET_EXTRA_ARGS=--container-runtime-endpoint=unix:///run/crishim/crishim.sock\"\n"
	if err := writeFile(hostPath("/etc/systemd/system/kubelet.service.d/10-crishim.conf"), []byte(old)); err != nil {
		t.Fatal(err)
	}
	_, st, err := kubeletStart(hostPath)
	if err != nil {
		t.Fatal(err)
	}
	if argv := strings.Join(st.ExecStart.Argv, " "); strings.Contains(argv, "crishim.sock") {
		t.Errorf("the old drop-in reached the kubelet's command line: %s", argv)
	}
}

// TestCheckRefusesEndpointFlags: a flag that beats crishim's KubeletConfiguration drop-in,
// in either environment file, stops the kubelet's start with a message naming it.
func TestCheckRefusesEndpointFlags(t *testing.T) {
	for _, tc := range []struct{ file, content, flag string }{
		{kubeadmFlagsEnv, `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --node-ip=10.0.0.9"`, "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock"},
		{kubeletDefaultsEnv, `KUBELET_EXTRA_ARGS="--v=2 --image-service-endpoint unix:///run/containerd/containerd.sock"`, "--image-service-endpoint"},
		{kubeletDefaultsEnv, `KUBELET_EXTRA_ARGS=--config-dir=/etc/kubelet.d`, "--config-dir=/etc/kubelet.d"},
	} {
		hostPath := kubeadmRoot(t)
		if err := writeFile(hostPath(tc.file), []byte(tc.content+"\n")); err != nil {
			t.Fatal(err)
		}
		_, st, err := kubeletStart(hostPath)
		if err != nil {
			t.Fatal(err)
		}
		err = runExecStartPre(context.Background(), st)
		if err == nil || !strings.Contains(err.Error(), "the kubelet flag "+tc.flag+" overrides") {
			t.Errorf("%s with %s: the kubelet's start gave %v, want a refusal naming the flag", tc.file, tc.content, err)
		}
	}
}

// TestSystemdAnalyzeVerify has systemd itself check the unit files the bed starts the
// kubelet from (and crishim's own unit) offline.
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian package systemd)")
	}
	hostPath := kubeadmRoot(t)
	root := filepath.Dir(hostPath("/etc/"))
	pkg, err := packagingDir()
	if err != nil {
		t.Fatal(err)
	}
	unit, err := os.ReadFile(filepath.Join(pkg, "systemd", "crishim.service"))
	if err != nil {
		t.Fatal(err)
	}
	socket, err := os.ReadFile(filepath.Join(pkg, "systemd", "crishim.socket"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"/usr/lib/systemd/system/crishim.service": string(unit), "/usr/lib/systemd/system/crishim.socket": string(socket)}
	// What verify looks for beyond the units under test: the default dependencies' targets
	// and the commands, as stand-ins.
	for _, target := range []string{"sysinit", "basic", "shutdown", "multi-user", "network", "network-online", "sockets"} {
		files["/usr/lib/systemd/system/"+target+".target"] = "[Unit]\nDescription=" + target + "\n"
	}
	for p, content := range files {
		if err := writeFile(filepath.Join(root, p), []byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range []string{"/usr/bin/kubelet", "/bin/sh", "/bin/kill", "/usr/local/bin/crishim"} {
		if err := writeFile(filepath.Join(root, cmd), []byte("#!/bin/true\n")); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(root, cmd), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(analyze, "verify", "--root="+root, "--man=no", "kubelet.service", "crishim.service", "crishim.socket").CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestInstallDocsShowPackagedFiles: docs/install.md shows crishim's kubelet files exactly as
// packaging/ holds them (and so as the bed installs them), each in a code block of its own.
func TestInstallDocsShowPackagedFiles(t *testing.T) {
	pkg, err := packagingDir()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(pkg, "..", "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := codeBlocks(string(doc))
	for _, f := range crishimKubeletFiles {
		b, err := os.ReadFile(filepath.Join(pkg, f.src))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(blocks, string(b)) {
			t.Errorf("docs/install.md has no code block equal to packaging/%s", f.src)
		}
		if !strings.Contains(string(doc), "packaging/"+f.src+" "+f.dst) {
			t.Errorf("docs/install.md does not install packaging/%s as %s", f.src, f.dst)
		}
	}
	// kubeadm's drop-in as the docs quote it is the bed's copy, comments and section left out.
	b, err := kubeadmFiles.ReadFile("kubeadm/10-kubeadm.conf")
	if err != nil {
		t.Fatal(err)
	}
	var directives strings.Builder
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "[") {
			directives.WriteString(line)
		}
	}
	if !slices.Contains(blocks, directives.String()) {
		t.Errorf("docs/install.md does not quote the directives of test/node/kubeadm/10-kubeadm.conf:\n%s", directives.String())
	}
}

// codeBlocks returns the contents of a Markdown document's fenced code blocks.
func codeBlocks(doc string) []string {
	var blocks []string
	var cur *strings.Builder
	for _, line := range strings.SplitAfter(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			if cur == nil {
				cur = &strings.Builder{}
			} else {
				blocks = append(blocks, cur.String())
				cur = nil
			}
			continue
		}
		if cur != nil {
			cur.WriteString(line)
		}
	}
	return blocks
}

// TestHostPathKeepsUnitsInTheNode: every directory systemd reads units from maps under the
// node's root, so the machine's own units never join the bed's kubelet.
func TestHostPathKeepsUnitsInTheNode(t *testing.T) {
	l := layout{"/node"}
	hostPath := l.hostPath(Binaries{Dir: "/bins"})
	for _, d := range systemdunit.UnitDirs {
		if got := hostPath(d + "/kubelet.service.d"); !strings.HasPrefix(got, "/node/root/") {
			t.Errorf("%s maps to %s, outside the node", d, got)
		}
	}
	for in, want := range map[string]string{"/usr/bin/kubelet": "/bins/kubelet", "/bin/sh": "/bin/sh", "/var/lib/kubelet": "/node/root/var/lib/kubelet", "/var/lib/kubeletx": "/var/lib/kubeletx"} {
		if got := hostPath(in); got != want {
			t.Errorf("hostPath(%s) = %s, want %s", in, got, want)
		}
	}
}
