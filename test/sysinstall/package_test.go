package sysinstall

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/crishim/crishim/test/harness"
)

// This file's name sorts last: its test leaves the package installed.

const packageVersion = "0.0.1~install-pkg"

// TestFleetInstallerLeavesThePackage: on a node where crishim came from the .deb (its unit
// /lib/systemd/system/crishim.service, the binary /usr/bin/crishim) but the kubelet still
// talks to containerd, the installer writes none of its own files: it points the kubelet at
// the package's crishim, every pod kept. The uninstaller points the kubelet back at
// containerd and leaves the package's crishim installed and running.
func TestFleetInstallerLeavesThePackage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dist := t.TempDir()
	cmd := exec.CommandContext(ctx, "make", "-C", repo, "deb", "DIST="+dist, "DEB_VERSION="+packageVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make deb: %v\n%s", err, out)
	}
	deb := filepath.Join(dist, "crishim_"+packageVersion+"_"+runtime.GOARCH+".deb")
	if _, err := os.Stat(deb); err != nil {
		t.Fatal(err)
	}
	if err := testNode.InstallDeb(ctx, deb); err != nil {
		t.Fatal(err)
	}
	if ep := kubeletEndpoint(ctx, t); ep != directEndpoint {
		t.Fatalf("the kubelet talks to %s, want %s before the installer", ep, directEndpoint)
	}
	runPod(ctx, t, "package-node-pod")
	before := podStates(ctx, t, []string{"package-node-pod"})

	kubectl(ctx, t, nil, "apply", "-f", filepath.Join(repo, "packaging/kubernetes/install/rbac.yaml"))
	kubectl(ctx, t, nil, "label", "--overwrite", "node", testNode.Name, "crishim.io/install=true")
	ds := manifest(t, "installer.yaml", firstRef)
	kubectl(ctx, t, ds, "apply", "-f", "-")
	if err := waitLog(ctx, "crishim-node-installer", "done; waiting to be stopped"); err != nil {
		dumpInstaller(ctx, t, "crishim-node-installer")
		t.Fatal(err)
	}
	if ep := kubeletEndpoint(ctx, t); ep != crishimEndpoint {
		t.Errorf("the kubelet talks to %s, want the package's crishim at %s", ep, crishimEndpoint)
	}
	files, err := testNode.NodeExec(ctx, "sh", "-c", `
systemctl show -p FragmentPath crishim
for f in /usr/local/bin/crishim /usr/local/bin/crishimctl /etc/systemd/system/crishim.service /etc/systemd/system/crishim.socket; do test -e $f && echo written: $f; done
true`)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(string(files)), " "); got != "FragmentPath=/lib/systemd/system/crishim.service" {
		t.Errorf("the installer wrote over the package: %q", got)
	}
	checkPodsKept(ctx, t, "install over the package", before)

	kubectl(ctx, t, ds, "delete", "--wait=true", "-f", "-")
	un := manifest(t, "uninstall/uninstaller.yaml", firstRef)
	kubectl(ctx, t, un, "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = testNode.Kubectl(context.Background(), un, "delete", "--ignore-not-found", "-f", "-")
		_, _ = testNode.Kubectl(context.Background(), nil, "delete", "--ignore-not-found", "--wait=false", "-f", filepath.Join(repo, "packaging/kubernetes/install/rbac.yaml"))
	})
	if err := waitLog(ctx, "crishim-node-uninstaller", "done; waiting to be stopped"); err != nil {
		dumpInstaller(ctx, t, "crishim-node-uninstaller")
		t.Fatal(err)
	}
	if ep := kubeletEndpoint(ctx, t); ep != directEndpoint {
		t.Errorf("after the uninstall the kubelet talks to %s, want %s", ep, directEndpoint)
	}
	out, err := testNode.NodeExec(ctx, "sh", "-c", "systemctl is-active crishim.socket crishim; dpkg-query -W -f '${Status}' crishim")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(strings.Fields(string(out)), " "); got != "active active install ok installed" {
		t.Errorf("after the uninstall the package's crishim: %q, want it installed and running", got)
	}
	checkPodsKept(ctx, t, "uninstall over the package", before)
}

// waitLog waits until the log of DaemonSet ds says want.
func waitLog(ctx context.Context, ds, want string) error {
	return harness.Poll(ctx, 2*time.Minute, func(ctx context.Context) error {
		out, err := testNode.Kubectl(ctx, nil, "-n", ns, "logs", "ds/"+ds)
		if err != nil {
			return err
		}
		if !strings.Contains(string(out), want) {
			return fmt.Errorf("%s has not logged %q", ds, want)
		}
		return nil
	})
}
