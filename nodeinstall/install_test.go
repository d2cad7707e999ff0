package nodeinstall

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeSystemd records the calls; a unit listed in failRestart fails its restart.
type fakeSystemd struct {
	calls       []string
	fragment    map[string]string
	failRestart map[string]bool
}

func (f *fakeSystemd) rec(s string) { f.calls = append(f.calls, s) }
func (f *fakeSystemd) Reload(context.Context) error {
	f.rec("reload")
	return nil
}
func (f *fakeSystemd) Enable(_ context.Context, u ...string) error {
	f.rec("enable " + strings.Join(u, " "))
	return nil
}
func (f *fakeSystemd) Disable(_ context.Context, u ...string) error {
	f.rec("disable " + strings.Join(u, " "))
	return nil
}
func (f *fakeSystemd) Start(_ context.Context, u string) error { f.rec("start " + u); return nil }
func (f *fakeSystemd) Stop(_ context.Context, u string) error  { f.rec("stop " + u); return nil }
func (f *fakeSystemd) Restart(_ context.Context, u string) error {
	f.rec("restart " + u)
	if f.failRestart[u] {
		return fmt.Errorf("restart %s: job failed", u)
	}
	return nil
}
func (f *fakeSystemd) FragmentPath(_ context.Context, u string) (string, error) {
	return f.fragment[u], nil
}

// fakeCluster is the node's taint and label; notReady makes WaitReady fail while set.
type fakeCluster struct {
	taint, label bool
	taintSeen    bool // the taint was on at some point
	notReady     func() bool
	calls        []string
}

func (c *fakeCluster) SetTaint(_ context.Context, on bool) error {
	c.taint = on
	c.taintSeen = c.taintSeen || on
	c.calls = append(c.calls, fmt.Sprint("taint ", on))
	return nil
}
func (c *fakeCluster) SetLabel(_ context.Context, on bool) error {
	c.label = on
	c.calls = append(c.calls, fmt.Sprint("label ", on))
	return nil
}
func (c *fakeCluster) WaitReady(context.Context, time.Time) error {
	if c.notReady != nil && c.notReady() {
		return errors.New("node not Ready")
	}
	return nil
}
func (c *fakeCluster) Labelled(context.Context) (bool, error) { return c.label, nil }

// payloadDir is an image payload whose crishim says version.
func payloadDir(t *testing.T, version string) string {
	t.Helper()
	d := t.TempDir()
	for _, f := range append(slices.Clone(crishimFiles), kubeletFiles...) {
		body := "payload " + f.src + "\n"
		if strings.HasPrefix(f.src, "bin/") {
			body = "binary " + version
		}
		if err := os.MkdirAll(filepath.Join(d, filepath.Dir(f.src)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, f.src), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func newInstaller(t *testing.T, root, payload string) (*Installer, *fakeSystemd, *fakeCluster) {
	sd := &fakeSystemd{fragment: map[string]string{}, failRestart: map[string]bool{}}
	cl := &fakeCluster{}
	in := &Installer{
		Root: root, Payload: payload, Systemd: sd, Cluster: cl,
		CheckCRI:     func(context.Context) error { return nil },
		CheckTimeout: time.Second,
		Log:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	return in, sd, cl
}

func readHost(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		return "<absent>"
	}
	return string(b)
}

// TestInstallWritesFilesAndDropIns: a fresh node gets crishim's binaries, its units headed
// by the installer's marker, the kubelet's two drop-ins as the payload has them (byte for
// byte), crishim started under its socket, the kubelet restarted after the drop-ins, the
// taint on while it happens and off after, the label last.
func TestInstallWritesFilesAndDropIns(t *testing.T) {
	root, payload := t.TempDir(), payloadDir(t, "v1")
	in, sd, cl := newInstaller(t, root, payload)
	if err := in.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := readHost(t, root, CrishimBin); got != "binary v1" {
		t.Errorf("%s = %q", CrishimBin, got)
	}
	if got := readHost(t, root, CrishimService); !strings.HasPrefix(got, OwnUnitMarker) || !strings.HasSuffix(got, "payload systemd/crishim.service\n") {
		t.Errorf("%s = %q, want the marker and the payload's unit", CrishimService, got)
	}
	for _, f := range kubeletFiles {
		if got, want := readHost(t, root, f.dst), "payload "+f.src+"\n"; got != want {
			t.Errorf("%s = %q, want %q", f.dst, got, want)
		}
	}
	st, err := os.Stat(filepath.Join(root, CrishimBin))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("%s mode: %v %v", CrishimBin, st, err)
	}
	want := []string{"reload", "enable crishim.socket crishim.service", "start crishim.socket", "restart crishim.service", "reload", "restart kubelet.service"}
	if !slices.Equal(sd.calls, want) {
		t.Errorf("systemd calls %q, want %q", sd.calls, want)
	}
	if wantCl := []string{"taint true", "label true", "taint false"}; !slices.Equal(cl.calls, wantCl) {
		t.Errorf("node calls %q, want %q", cl.calls, wantCl)
	}

	// Again (a pod restarted): nothing changes, nothing restarts.
	sd.calls, cl.calls = nil, nil
	if err := in.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"start crishim.socket", "start crishim.service"}; !slices.Equal(sd.calls, want) {
		t.Errorf("second run: systemd calls %q, want %q", sd.calls, want)
	}
	if len(cl.calls) != 0 {
		t.Errorf("second run: node calls %q", cl.calls)
	}

	// A newer image: crishim restarted with the new binary, the kubelet not.
	in.Payload = payloadDir(t, "v2")
	sd.calls, cl.calls = nil, nil
	if err := in.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := readHost(t, root, CrishimBin); got != "binary v2" {
		t.Errorf("after the upgrade %s = %q", CrishimBin, got)
	}
	if slices.Contains(sd.calls, "restart kubelet.service") || !slices.Contains(sd.calls, "restart crishim.service") {
		t.Errorf("upgrade: systemd calls %q, want crishim restarted and the kubelet not", sd.calls)
	}
}

// TestInstallRollsBackWhenTheNodeIsNotReady: the kubelet restarted on crishim does not make
// the node Ready: every file goes back as it was (none were there), the kubelet is restarted
// again on its own endpoint, crishim stopped and disabled, the taint off, no label.
func TestInstallRollsBackWhenTheNodeIsNotReady(t *testing.T) {
	root, payload := t.TempDir(), payloadDir(t, "v1")
	in, sd, cl := newInstaller(t, root, payload)
	// Ready only once the kubelet's drop-ins are gone again.
	cl.notReady = func() bool { return readHost(t, root, KubeletConfDropIn) != "<absent>" }
	err := in.Install(context.Background())
	if err == nil || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("Install: %v, want a rolled back failure", err)
	}
	for _, p := range append(crishimPaths(), kubeletPaths()...) {
		if got := readHost(t, root, p); got != "<absent>" {
			t.Errorf("after the rollback %s = %q, want it gone", p, got)
		}
	}
	if !cl.taintSeen || cl.taint || cl.label {
		t.Errorf("taint seen %v, taint %v, label %v: want tainted during, neither after", cl.taintSeen, cl.taint, cl.label)
	}
	n := 0
	for _, c := range sd.calls {
		if c == "restart kubelet.service" {
			n++
		}
	}
	if n != 2 || !slices.Contains(sd.calls, "disable crishim.socket crishim.service") {
		t.Errorf("systemd calls %q: want the kubelet restarted twice (on crishim, back) and crishim disabled", sd.calls)
	}
}

// TestInstallRollbackRestoresThePreviousCrishim: an upgrade whose crishim does not answer
// puts the previous binary and units back and restarts crishim on them; the kubelet, already
// on crishim, is not restarted.
func TestInstallRollbackRestoresThePreviousCrishim(t *testing.T) {
	root := t.TempDir()
	in, sd, _ := newInstaller(t, root, payloadDir(t, "v1"))
	if err := in.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	in.Payload = payloadDir(t, "v2")
	in.CheckCRI = func(context.Context) error {
		if readHost(t, root, CrishimBin) == "binary v2" {
			return errors.New("Unavailable")
		}
		return nil
	}
	sd.calls = nil
	if err := in.Install(context.Background()); err == nil {
		t.Fatal("Install of a crishim that does not answer succeeded")
	}
	if got := readHost(t, root, CrishimBin); got != "binary v1" {
		t.Errorf("after the rollback %s = %q, want v1 back", CrishimBin, got)
	}
	if slices.Contains(sd.calls, "restart kubelet.service") {
		t.Errorf("systemd calls %q: the kubelet was restarted", sd.calls)
	}
	if last := sd.calls[len(sd.calls)-1]; last != "restart crishim.service" {
		t.Errorf("systemd calls %q: want the previous crishim restarted last", sd.calls)
	}
}

// TestPlanRollback: what a rollback restarts, from the journal alone.
func TestPlanRollback(t *testing.T) {
	for _, tc := range []struct {
		name string
		j    journal
		want rollbackPlan
	}{
		{"nothing", nil, rollbackPlan{}},
		{"fresh crishim", journal{{path: CrishimBin}, {path: CrishimService}}, rollbackPlan{removeCrishim: true}},
		{"upgraded crishim", journal{{path: CrishimBin, existed: true}}, rollbackPlan{restartCrishim: true}},
		{"fresh crishim and kubelet", journal{{path: CrishimService}, {path: KubeletConfDropIn}}, rollbackPlan{removeCrishim: true, restartKubelet: true}},
		{"kubelet only (package crishim)", journal{{path: KubeletUnitDropIn}, {path: KubeletConfDropIn}}, rollbackPlan{restartKubelet: true}},
	} {
		if got := planRollback(tc.j); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestInstallLeavesAPackagesCrishim: with crishim.service loaded from the package's file,
// the installer writes no binary or unit, starts that crishim and only adds the drop-ins;
// the uninstall removes the drop-ins and leaves the package's crishim running.
func TestInstallLeavesAPackagesCrishim(t *testing.T) {
	root := t.TempDir()
	in, sd, _ := newInstaller(t, root, payloadDir(t, "v1"))
	sd.fragment["crishim.service"] = "/lib/systemd/system/crishim.service"
	if err := in.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range crishimPaths() {
		if got := readHost(t, root, p); got != "<absent>" {
			t.Errorf("%s written over a package's crishim: %q", p, got)
		}
	}
	if got := readHost(t, root, KubeletConfDropIn); got == "<absent>" {
		t.Error("no kubelet drop-in")
	}
	sd.calls = nil
	if err := in.Uninstall(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := readHost(t, root, KubeletConfDropIn); got != "<absent>" {
		t.Errorf("drop-in left: %q", got)
	}
	for _, c := range sd.calls {
		if strings.Contains(c, "crishim") {
			t.Errorf("the uninstall touched the package's crishim: %q", sd.calls)
		}
	}
}

// TestUninstallRemovesItsCrishim: the kubelet back on its endpoint first (drop-ins gone,
// restarted), then the installer's crishim stopped (socket first), disabled and removed.
func TestUninstallRemovesItsCrishim(t *testing.T) {
	root := t.TempDir()
	in, sd, cl := newInstaller(t, root, payloadDir(t, "v1"))
	if err := in.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	sd.calls, cl.calls = nil, nil
	if err := in.Uninstall(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(crishimPaths(), kubeletPaths()...) {
		if got := readHost(t, root, p); got != "<absent>" {
			t.Errorf("%s left: %q", p, got)
		}
	}
	want := []string{"reload", "restart kubelet.service", "stop crishim.socket", "stop crishim.service", "disable crishim.socket crishim.service", "reload"}
	if !slices.Equal(sd.calls, want) {
		t.Errorf("systemd calls %q, want %q", sd.calls, want)
	}
	if wantCl := []string{"label false", "taint true", "taint false"}; !slices.Equal(cl.calls, wantCl) {
		t.Errorf("node calls %q, want %q", cl.calls, wantCl)
	}
}

// TestUninstallRollsBackWhenTheNodeIsNotReady: the kubelet does not come back Ready on its
// own endpoint: the drop-ins go back, the kubelet is restarted on crishim, the label comes
// back, and crishim stays.
func TestUninstallRollsBackWhenTheNodeIsNotReady(t *testing.T) {
	root := t.TempDir()
	in, sd, cl := newInstaller(t, root, payloadDir(t, "v1"))
	if err := in.Install(context.Background()); err != nil {
		t.Fatal(err)
	}
	cl.notReady = func() bool { return readHost(t, root, KubeletConfDropIn) == "<absent>" }
	sd.calls = nil
	if err := in.Uninstall(context.Background()); err == nil {
		t.Fatal("Uninstall succeeded on a node not Ready without crishim")
	}
	if got := readHost(t, root, KubeletConfDropIn); got == "<absent>" {
		t.Error("the drop-in was not put back")
	}
	if got := readHost(t, root, CrishimBin); got != "binary v1" {
		t.Errorf("crishim removed: %q", got)
	}
	if !cl.label || cl.taint {
		t.Errorf("label %v taint %v, want the label back and no taint", cl.label, cl.taint)
	}
	if slices.Contains(sd.calls, "stop crishim.service") {
		t.Errorf("crishim stopped: %q", sd.calls)
	}
}
