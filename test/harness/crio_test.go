package harness

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCRIOPieces starts CRI-O in a slot from the pieces of crio*.go alone (build, config,
// images, teardown), runs a pod with a busybox container and execs in it.
func TestCRIOPieces(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	begin := time.Now()
	if _, err := ensureCRIOBinaries(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("CRI-O binaries ready in %v", time.Since(begin).Round(time.Millisecond))

	n, lock, err := acquireSlot()
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	l := layout{slotDir(n)}
	m := newSlotMeta(n)
	if err := teardown(ctx, l.dir, m); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeSlotMeta(l.dir, m); err != nil {
		t.Fatal(err)
	}
	if err := writeCRIOConfig(l, m, PauseImage); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(l.logFile())
	if err != nil {
		t.Fatal(err)
	}
	argv := crioCommand(l)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), crioEnv(l)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logFile.Close()
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	go func() { d.err = cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		tctx, tcancel := context.WithTimeout(context.Background(), teardownTimeout)
		defer tcancel()
		_ = removePodsIfAnswering(tctx, l)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-d.done
		}
		if err := teardownCRIO(l); err != nil {
			t.Error(err)
		}
		if err := teardown(tctx, l.dir, m); err != nil {
			t.Error(err)
		}
	})
	if err := waitReady(ctx, l, d); err != nil {
		t.Fatal(err)
	}
	t.Logf("crio ready after %v", time.Since(begin).Round(time.Millisecond))
	if err := importCRIOImages(ctx, l); err != nil {
		t.Fatalf("%v\n%s", err, logTail(l))
	}
	t.Logf("images in after %v", time.Since(begin).Round(time.Millisecond))

	c := &Containerd{layout: l, PodsDir: l.pods(), BusyboxImage: BusyboxImage, Socket: l.socket()}
	conn, err := dialCRI(l.socket())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	v, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("runtime %s %s", v.GetRuntimeName(), v.GetRuntimeVersion())
	w := runWorkload(t, ctx, c, rt, "crio-pieces")
	t.Logf("pod %s ip %s container %s pid %d", w.podID, w.podIP, w.containerID, w.containerPID)
	execEcho(t, ctx, rt, w.containerID)
}
