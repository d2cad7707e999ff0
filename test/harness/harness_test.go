package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crishim/crishim/test/lockedbuf"
)

// helperEnv selects a role for the test binary when a test re-executes it as a separate
// process (one that can be SIGKILLed, or that exits leaving a detached containerd).
const helperEnv = "CRISHIM_HARNESS_HELPER"

func requireRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: starts a real containerd")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: starts containerd, mounts overlayfs, creates a bridge")
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startHarness starts a Containerd that is stopped when the test ends.
func startHarness(t *testing.T, ctx context.Context, opts Options) *Containerd {
	t.Helper()
	begin := time.Now()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("started containerd in %s (slot %d) in %v", c.Dir, c.Slot, time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

func runtimeClient(t *testing.T, c *Containerd) runtimeapi.RuntimeServiceClient {
	t.Helper()
	conn, err := c.Dial()
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

// workload is a pod with one busybox container sleeping in it.
type workload struct {
	podID, containerID string
	podIP              string
	containerPID       int
}

func runWorkload(t *testing.T, ctx context.Context, c *Containerd, rt runtimeapi.RuntimeServiceClient, name string) workload {
	t.Helper()
	podCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Uid: name + "-uid", Namespace: "default"},
		Hostname:     name,
		LogDirectory: filepath.Join(c.PodsDir, name),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	pod, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: podCfg})
	if err != nil {
		t.Fatalf("RunPodSandbox: %v\n%s", err, logTail(c.layout))
	}
	w := workload{podID: pod.GetPodSandboxId()}
	ps, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: w.podID})
	if err != nil {
		t.Fatalf("PodSandboxStatus: %v", err)
	}
	w.podIP = ps.GetStatus().GetNetwork().GetIp()

	ctr, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: w.podID,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "sleeper"},
			Image:    &runtimeapi.ImageSpec{Image: c.BusyboxImage},
			Command:  []string{"sleep", "3600"},
			LogPath:  "sleeper.log",
			Linux:    &runtimeapi.LinuxContainerConfig{},
		},
		SandboxConfig: podCfg,
	})
	if err != nil {
		t.Fatalf("CreateContainer: %v", err)
	}
	w.containerID = ctr.GetContainerId()
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: w.containerID}); err != nil {
		t.Fatalf("StartContainer: %v\n%s", err, logTail(c.layout))
	}
	w.containerPID = containerPID(t, ctx, rt, w.containerID)
	return w
}

// containerPID reads the task pid from containerd's verbose ContainerStatus info.
func containerPID(t *testing.T, ctx context.Context, rt runtimeapi.RuntimeServiceClient, id string) int {
	t.Helper()
	st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatalf("ContainerStatus: %v", err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(st.GetInfo()["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("no pid in ContainerStatus info %q: %v", st.GetInfo()["info"], err)
	}
	return info.Pid
}

func execEcho(t *testing.T, ctx context.Context, rt runtimeapi.RuntimeServiceClient, id string) {
	t.Helper()
	resp, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"echo", "hi"}, Timeout: 10})
	if err != nil {
		t.Fatalf("ExecSync: %v", err)
	}
	if resp.GetExitCode() != 0 || string(resp.GetStdout()) != "hi\n" {
		t.Fatalf("ExecSync echo hi: exit %d stdout %q stderr %q", resp.GetExitCode(), resp.GetStdout(), resp.GetStderr())
	}
}

func linkExists(name string) bool {
	_, err := os.Lstat(filepath.Join("/sys/class/net", name))
	return err == nil
}

func shimPIDs(l layout) []int {
	var pids []int
	for _, pid := range allPIDs() {
		if isShimOf(pid, l) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// assertGone checks that nothing of a stopped slot remains on the machine.
func assertGone(t *testing.T, dir string, m slotMeta, pids []int) {
	t.Helper()
	l := layout{dir}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d (%q) still alive", pid, procCmdline(pid))
		}
	}
	for _, pid := range allPIDs() {
		if alive(pid) && (isShimOf(pid, l) || isContainerdOf(pid, l)) {
			t.Errorf("process %d (%q) of the slot still alive", pid, procCmdline(pid))
		}
	}
	if linkExists(m.Bridge) {
		t.Errorf("bridge %s still exists", m.Bridge)
	}
	if mps, err := mountsUnder(dir); err != nil || len(mps) > 0 {
		t.Errorf("mounts left under %s: %v (%v)", dir, mps, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists (%v)", dir, err)
	}
	if m, _ := filepath.Glob(filepath.Join(cniResultsDir, m.Network+"-*")); len(m) > 0 {
		t.Errorf("CNI results left: %v", m)
	}
}

func TestPodLifecycle(t *testing.T) {
	requireRoot(t)
	ctx := testContext(t)
	c := startHarness(t, ctx, Options{})
	rt := runtimeClient(t, c)

	w := runWorkload(t, ctx, c, rt, "lifecycle")
	_, subnet, _ := net.ParseCIDR(c.Subnet)
	if ip := net.ParseIP(w.podIP); ip == nil || !subnet.Contains(ip) {
		t.Errorf("pod IP %q not in %s", w.podIP, c.Subnet)
	}
	execEcho(t, ctx, rt, w.containerID)
	if !linkExists(c.Bridge) {
		t.Errorf("bridge %s missing while a pod runs", c.Bridge)
	}
	if mps, _ := mountsUnder(c.Dir); len(mps) == 0 {
		t.Errorf("no mounts under %s while a pod runs", c.Dir)
	}

	pids := append(shimPIDs(c.layout), w.containerPID, c.PID())
	begin := time.Now()
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("stopped in %v", time.Since(begin).Round(time.Millisecond))
	assertGone(t, c.Dir, c.meta, pids)
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestKillRestart(t *testing.T) {
	requireRoot(t)
	ctx := testContext(t)
	var log lockedbuf.Buffer
	c := startHarness(t, ctx, Options{Log: &log})
	rt := runtimeClient(t, c)
	w := runWorkload(t, ctx, c, rt, "restart")

	oldPID := c.PID()
	begin := time.Now()
	if err := c.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	t.Logf("killed in %v", time.Since(begin).Round(time.Millisecond))
	if alive(oldPID) {
		t.Fatalf("containerd %d alive after Kill", oldPID)
	}
	if !alive(w.containerPID) {
		t.Fatalf("container process %d died with containerd", w.containerPID)
	}
	begin = time.Now()
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("restarted in %v", time.Since(begin).Round(time.Millisecond))

	st, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: w.containerID})
	if err != nil {
		t.Fatalf("ContainerStatus after restart: %v", err)
	}
	if s := st.GetStatus().GetState(); s != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Fatalf("container state after restart = %v, want running", s)
	}
	if pid := containerPID(t, ctx, rt, w.containerID); pid != w.containerPID {
		t.Errorf("container pid after restart = %d, want %d", pid, w.containerPID)
	}
	execEcho(t, ctx, rt, w.containerID)
	if n := strings.Count(log.String(), bootMessage(c.Runtime)); n != 2 {
		t.Errorf("Options.Log got %d boot messages, want 2 (start and restart)", n)
	}
}

// bootMessage is what the runtime logs once per start.
func bootMessage(r Runtime) string {
	if r == RuntimeCRIO {
		return "Current CRI-O configuration"
	}
	return "containerd successfully booted"
}

// helperReport is what a helper process prints once its workload runs.
type helperReport struct {
	Dir           string `json:"dir"`
	Slot          int    `json:"slot"`
	ContainerdPID int    `json:"containerdPid"`
	ContainerPID  int    `json:"containerPid"`
	ShimPIDs      []int  `json:"shimPids"`
}

// TestHelperProcess is not a test: it is the body of the processes the crash and detach
// tests start. It starts a harness, runs a workload, reports, and then either waits to be
// killed ("crash") or exits without stopping anything ("detach").
func TestHelperProcess(t *testing.T) {
	role := os.Getenv(helperEnv)
	if role == "" {
		t.Skip("helper process only")
	}
	ctx := testContext(t)
	c, err := Start(ctx, Options{Detach: role == "detach"})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	rt := runtimeClient(t, c)
	w := runWorkload(t, ctx, c, rt, "helper")
	b, _ := json.Marshal(helperReport{Dir: c.Dir, Slot: c.Slot, ContainerdPID: c.PID(), ContainerPID: w.containerPID, ShimPIDs: shimPIDs(c.layout)})
	fmt.Printf("REPORT %s\n", b)
	if role == "crash" {
		time.Sleep(time.Minute)
		t.Fatal("helper was not killed")
	}
}

// startHelper runs TestHelperProcess in a new process with the given role and returns its
// report once the workload runs.
func startHelper(t *testing.T, role string) (*exec.Cmd, helperReport) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+role)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if js, ok := strings.CutPrefix(sc.Text(), "REPORT "); ok {
			var r helperReport
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				t.Fatalf("helper report %q: %v", js, err)
			}
			go func() { _, _ = bufio.NewReader(out).WriteTo(os.Stdout) }()
			return cmd, r
		}
		t.Logf("helper: %s", sc.Text())
	}
	_ = cmd.Wait()
	t.Fatalf("helper %s exited without a report", role)
	return nil, helperReport{}
}

// waitDead waits until pid is dead.
func waitDead(t *testing.T, pid int, what string) {
	t.Helper()
	if left := signalAndWait([]int{pid}, 0, 5*time.Second); len(left) > 0 {
		t.Fatalf("%s (pid %d) still alive", what, pid)
	}
}

// TestCrashedRunIsSwept kills a process that uses a harness, with a pod running, and checks
// that its containerd dies with it and that the next owner of the slot sweeps the leftovers
// and works.
func TestCrashedRunIsSwept(t *testing.T) {
	requireRoot(t)
	ctx := testContext(t)
	cmd, r := startHelper(t, "crash")
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitDead(t, r.ContainerdPID, "containerd of a killed harness")
	for _, pid := range append(r.ShimPIDs, r.ContainerPID) {
		if !alive(pid) {
			t.Fatalf("pid %d is already dead; the test needs leftovers to sweep", pid)
		}
	}

	lock, err := lockSlot(r.Slot)
	if err != nil {
		t.Fatalf("slot %d of the killed helper is not free: %v", r.Slot, err)
	}
	opts := Options{}
	be, err := prepare(ctx, &opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := startInSlot(ctx, opts, be, r.Slot, lock)
	if err != nil {
		t.Fatalf("start in the crashed slot: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	for _, pid := range append(r.ShimPIDs, r.ContainerPID) {
		if alive(pid) {
			t.Errorf("leftover process %d (%q) survived the sweep", pid, procCmdline(pid))
		}
	}
	rt := runtimeClient(t, c)
	pods, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(pods.GetItems()); n != 0 {
		t.Errorf("swept slot reports %d pods, want 0", n)
	}
	w := runWorkload(t, ctx, c, rt, "after-crash")
	execEcho(t, ctx, rt, w.containerID)
}

// TestDetachAndTeardown checks that a detached containerd outlives the process that started
// it, keeps its slot owned, and is removed entirely by Teardown.
func TestDetachAndTeardown(t *testing.T) {
	requireRoot(t)
	cmd, r := startHelper(t, "detach")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("detach helper: %v", err)
	}
	if !alive(r.ContainerdPID) {
		t.Fatalf("detached containerd %d died with its parent", r.ContainerdPID)
	}
	if f, err := lockSlot(r.Slot); !errors.Is(err, errSlotBusy) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("slot %d of a detached containerd is not owned: lock err = %v", r.Slot, err)
	}
	m, err := readSlotMeta(r.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Detached {
		t.Errorf("slot metadata does not record Detach")
	}

	begin := time.Now()
	if err := Teardown(r.Dir); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	t.Logf("Teardown took %v", time.Since(begin).Round(time.Millisecond))
	assertGone(t, r.Dir, m, append(r.ShimPIDs, r.ContainerPID, r.ContainerdPID))
	f, err := lockSlot(r.Slot)
	if err != nil {
		t.Fatalf("slot %d still owned after Teardown: %v", r.Slot, err)
	}
	f.Close()
}

func TestTeardownRefusesForeignDir(t *testing.T) {
	dir := t.TempDir()
	if err := Teardown(dir); err == nil {
		t.Fatalf("Teardown(%s) succeeded on a directory that is not a slot", dir)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("Teardown touched %s: %v", dir, err)
	}
}

func TestImageArchiveIsDeterministic(t *testing.T) {
	if _, err := os.Stat(busyboxPath); err != nil {
		t.Skip("no busybox")
	}
	ctx := testContext(t)
	a, err := buildImageArchive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	imageArchive.Lock()
	imageArchive.data = nil
	imageArchive.Unlock()
	b, err := buildImageArchive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Fatal("two builds of the image archive differ")
	}
}

func TestSlotNames(t *testing.T) {
	for n := range MaxSlots {
		if b := slotBridge(n); len(b) > 15 {
			t.Errorf("bridge name %q longer than IFNAMSIZ-1", b)
		}
		if _, _, err := net.ParseCIDR(slotSubnet(n)); err != nil {
			t.Errorf("subnet %q: %v", slotSubnet(n), err)
		}
		m, err := readSlotMeta(slotDir(n) + "-does-not-exist")
		if err == nil {
			t.Errorf("readSlotMeta accepted %+v for a non-slot name", m)
		}
		if len(layout{slotDir(n)}.socket()) > 100 {
			t.Errorf("socket path too long for sun_path")
		}
	}
}

// TestConcurrentSlots starts two harnesses at once: they must get distinct slots, bridges
// and subnets, and both must run pods.
func TestConcurrentSlots(t *testing.T) {
	requireRoot(t)
	ctx := testContext(t)
	var cs [2]*Containerd
	var errs [2]error
	var wg sync.WaitGroup
	for i := range cs {
		wg.Go(func() { cs[i], errs[i] = Start(ctx, Options{}) })
	}
	wg.Wait()
	for i, c := range cs {
		if c != nil {
			t.Cleanup(func() { _ = c.Stop() })
		}
		if errs[i] != nil {
			t.Fatalf("Start %d: %v", i, errs[i])
		}
	}
	if cs[0].Slot == cs[1].Slot || cs[0].Bridge == cs[1].Bridge || cs[0].Subnet == cs[1].Subnet {
		t.Fatalf("harnesses share a slot: %+v / %+v", cs[0].meta, cs[1].meta)
	}
	for i, c := range cs {
		rt := runtimeClient(t, c)
		w := runWorkload(t, ctx, c, rt, fmt.Sprintf("concurrent-%d", i))
		_, subnet, _ := net.ParseCIDR(c.Subnet)
		if ip := net.ParseIP(w.podIP); ip == nil || !subnet.Contains(ip) {
			t.Errorf("pod IP %q not in %s", w.podIP, c.Subnet)
		}
	}
}

// TestRestartReportsFailure breaks the config between Kill and Restart: Restart must fail
// fast, quoting containerd's log, and Stop must still clean up.
func TestRestartReportsFailure(t *testing.T) {
	requireRoot(t)
	ctx := testContext(t)
	c := startHarness(t, ctx, Options{})
	if err := c.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := os.WriteFile(c.layout.config(), []byte("version = [broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	err := c.Restart(ctx)
	if err == nil {
		t.Fatal("Restart succeeded on a broken config")
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Restart took %v to notice containerd exited", d)
	}
	if !strings.Contains(err.Error(), "containerd exited") || !strings.Contains(err.Error(), "tail of") {
		t.Errorf("Restart error lacks the exit and the log tail: %v", err)
	}
	t.Logf("Restart error: %v", err)
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.Restart(ctx); err == nil {
		t.Fatal("Restart after Stop succeeded")
	}
}

// TestTagImage: an imported image gets another name, as the node's pods ask for busybox
// by a name the bed does not import, on every runtime (CRI-O has no tag call).
func TestTagImage(t *testing.T) {
	requireRoot(t)
	ctx := testContext(t)
	c := startHarness(t, ctx, Options{})
	conn, err := c.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	images := runtimeapi.NewImageServiceClient(conn)
	const alias = "docker.io/library/busybox:crishim-alias"
	if err := c.TagImage(ctx, c.BusyboxImage, alias); err != nil {
		t.Fatalf("TagImage: %v", err)
	}
	id := func(name string) string {
		resp, err := images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: name}})
		if err != nil || resp.GetImage() == nil {
			t.Fatalf("ImageStatus %s: %v, %v", name, resp, err)
		}
		return resp.GetImage().GetId()
	}
	if a, b := id(alias), id(c.BusyboxImage); a != b {
		t.Errorf("%s is image %s, %s is %s: want one image", alias, a, c.BusyboxImage, b)
	}
	if err := c.TagImage(ctx, "docker.io/library/nosuch:image", alias); err == nil {
		t.Error("tagging an image the bed never imported succeeded")
	}
}
