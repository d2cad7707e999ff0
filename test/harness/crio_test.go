package harness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// requireCRIO skips unless RUNTIME=crio: a cold CRI-O build takes many minutes, which a run
// of the default runtime should not pay. With RUNTIME=crio the other tests of this package run
// on CRI-O too; these check what only CRI-O leaves behind.
func requireCRIO(t *testing.T) {
	t.Helper()
	requireRoot(t)
	// TestMain has prepared (built) the runtime RUNTIME names, and only that one.
	if r, err := RuntimeFromEnv(); err != nil || r != RuntimeCRIO {
		t.Skipf("%s=%s: CRI-O-only test", RuntimeEnv, os.Getenv(RuntimeEnv))
	}
}

// TestCRIOPodAndTeardown runs a pod with a plain and a privileged container on CRI-O, execs
// in both, and checks that Stop leaves no conmon, no container cgroup, no mount and no
// file of the slot.
func TestCRIOPodAndTeardown(t *testing.T) {
	requireCRIO(t)
	ctx := testContext(t)
	c, err := Start(ctx, Options{Runtime: RuntimeCRIO})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	if c.RuntimeName != "cri-o" || c.ContainerdAddress != "" {
		t.Errorf("runtime name %q, containerd address %q; want cri-o and none", c.RuntimeName, c.ContainerdAddress)
	}
	rt := runtimeClient(t, c)
	w := runWorkload(t, ctx, c, rt, "crio-pod")
	execEcho(t, ctx, rt, w.containerID)

	// CRI-O grants a privileged container every capability it knows, more than this
	// machine's bounding set; runcwrap makes runc accept it.
	podCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "crio-pod", Uid: "crio-pod-uid", Namespace: "default"},
		Hostname:     "crio-pod",
		LogDirectory: filepath.Join(c.PodsDir, "crio-pod"),
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	priv, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{
		PodSandboxId: w.podID,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "privileged"},
			Image:    &runtimeapi.ImageSpec{Image: c.BusyboxImage, UserSpecifiedImage: c.BusyboxImage},
			Command:  []string{"sleep", "3600"},
			LogPath:  "privileged.log",
			Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				Privileged: true,
			}},
		},
		SandboxConfig: podCfg,
	})
	if err != nil {
		t.Fatalf("CreateContainer privileged: %v", err)
	}
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: priv.GetContainerId()}); err != nil {
		t.Fatalf("StartContainer privileged: %v\n%s", err, logTail(c.layout))
	}
	execEcho(t, ctx, rt, priv.GetContainerId())

	var conmons []int
	for _, pid := range allPIDs() {
		if argv := procCmdline(pid); len(argv) > 0 && filepath.Base(argv[0]) == "conmon" && ArgvMentions(c.Dir)(argv) {
			conmons = append(conmons, pid)
		}
	}
	if len(conmons) == 0 {
		t.Errorf("no conmon names %s in its flags; teardown finds them that way", c.Dir)
	}
	tasks := crioTasks(c.layout)
	if len(tasks) == 0 {
		t.Fatalf("no container specs under %s", c.layout.crioRun())
	}
	var cgroups []string
	for _, task := range tasks {
		cgroups = append(cgroups, cgroupDirs(task.cgroupsPath)...)
	}

	dir, m := c.Dir, c.meta
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	assertGone(t, dir, m, append(conmons, w.containerPID))
	for _, d := range cgroups {
		if _, err := os.Stat(d); err == nil {
			t.Errorf("cgroup %s left", d)
		}
	}
	for _, pid := range allPIDs() {
		if argv := procCmdline(pid); alive(pid) && slices.ContainsFunc(argv, func(a string) bool { return within(a, dir) }) {
			t.Errorf("process %d %q still names the slot", pid, argv)
		}
	}
}

// TestCRIOConfigKeepsSharedPlacesOut: every path CRI-O writes to is in the slot; what is
// outside it is only read (conmon, the CNI plugins, the build).
func TestCRIOConfigKeepsSharedPlacesOut(t *testing.T) {
	l := layout{slotDir(MaxSlots - 1)}
	m := newSlotMeta(MaxSlots - 1)
	b := crioBins{Dir: filepath.Join(crioBinCacheDir, "key")}
	cfg := crioConfig(l, m, b, PauseImage)
	for _, want := range []string{
		`listen = "` + l.socket() + `"`,
		`cgroup_manager = "cgroupfs"`,
		`pause_image = "` + PauseImage + `"`,
		`pause_command = ""`,
		`runtime_path = "` + l.crioRuncWrapper() + `"`,
		`cni_default_network = "` + m.Network + `"`,
		"enable_nri = false",
		"enable_pod_events = true",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("CRI-O config lacks %q:\n%s", want, cfg)
		}
	}
	readOnly := []string{cniBinDir, b.Dir, binary("conmon")}
	for _, line := range strings.Split(cfg, "\n") {
		for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r == '"' || r == '[' || r == ']' || r == ',' || r == ' ' }) {
			if !strings.HasPrefix(f, "/") || within(f, l.dir) || slices.ContainsFunc(readOnly, func(d string) bool { return within(f, d) }) {
				continue
			}
			t.Errorf("CRI-O config names %s, outside the slot: %q", f, line)
		}
	}
	if len(l.crioAttach())+len("/")+64+len("/attach") > 107 {
		t.Errorf("attach socket path under %s exceeds a unix socket path's 107 bytes", l.crioAttach())
	}
	argv := crioCommand(l)
	if !slices.Contains(argv, l.config()) || !slices.Contains(argv, l.crioConfDir()) {
		t.Errorf("crio argv %q lacks the slot's config or drop-in dir", argv)
	}
}

// TestCRIORegistriesConfig: each mirrored host gets a [[registry]] with the mirror's host as
// its only mirror, insecure for plain HTTP; anything but an http(s) host URL is refused.
func TestCRIORegistriesConfig(t *testing.T) {
	conf, err := crioRegistriesConfig(map[string]string{"registry.k8s.io": "http://127.0.0.1:5000", "gcr.io": "https://mirror.example"})
	if err != nil {
		t.Fatal(err)
	}
	want := `unqualified-search-registries = []

[[registry]]
prefix = "gcr.io"
location = "gcr.io"

[[registry.mirror]]
location = "mirror.example"
insecure = false

[[registry]]
prefix = "registry.k8s.io"
location = "registry.k8s.io"

[[registry.mirror]]
location = "127.0.0.1:5000"
insecure = true
`
	if conf != want {
		t.Errorf("registries.conf:\n%s\nwant:\n%s", conf, want)
	}
	for _, bad := range []string{"127.0.0.1:5000", "ftp://h", "http://h/path", "http://"} {
		if _, err := crioRegistriesConfig(map[string]string{"gcr.io": bad}); err == nil {
			t.Errorf("mirror %q accepted", bad)
		}
	}
}
