// Command demo is `make demo`: it starts a private containerd, puts crishim
// in front of it and walks through what crishim does, printing each step.
// With --keep both stay running for crictl or a kubelet; --clean removes
// what a kept demo left.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/crishim/crishim/test/harness"
	"github.com/crishim/crishim/test/node"
)

func main() {
	crishim := flag.String("crishim", "bin/crishim", "crishim binary")
	crishimctl := flag.String("crishimctl", "bin/crishimctl", "crishimctl binary")
	keep := flag.Bool("keep", false, "leave containerd and crishim running")
	clean := flag.Bool("clean", false, "remove what a kept demo left running, then exit")
	dir := flag.String("dir", "", "directory for crishim's socket and log (created if missing; default: the private runtime's own directory under "+harness.BaseDir+")")
	kube := flag.Bool("kube", false, "run the kubectl chapter on a real node even if its Kubernetes binaries must be built first (cold: many minutes); without it the chapter runs only when they are cached")
	kubeNode := flag.Int("kube-node", 0, "node index of the kubectl chapter's node (0: `make node`'s, reused when it runs)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	if *clean {
		err = cleanKept()
	} else {
		err = run(ctx, *crishim, *crishimctl, *dir, *keep, *kube, *kubeNode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// crishimPidFile is where a kept demo records its crishim, inside the slot.
const crishimPidFile = "crishim.pid"

func run(ctx context.Context, crishimBin, ctlBin, dir string, keep, kube bool, kubeNode int) error {
	if os.Geteuid() != 0 {
		return errors.New("the demo starts a private containerd and needs root")
	}
	for _, bin := range []string{crishimBin, ctlBin} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%s: %w (run `make build` first)", bin, err)
		}
	}
	if dir != "" {
		// Before the runtime starts: a directory that cannot be used fails at once.
		abs, err := filepath.Abs(dir)
		if err != nil {
			return fmt.Errorf("--dir: %w", err)
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return fmt.Errorf("--dir: %w", err)
		}
		dir = abs
	}
	rt, err := harness.RuntimeFromEnv()
	if err != nil {
		return err
	}
	say("Starting a private %s (%s, offline images, own CNI bridge; RUNTIME= picks another)", rt, runtimeBlurb(rt))
	start := time.Now()
	cd, err := harness.Start(ctx, harness.Options{Detach: keep, Runtime: rt})
	if err != nil {
		return err
	}
	if !keep {
		defer func() {
			say("Tearing down the private containerd")
			if err := cd.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "demo: teardown:", err)
			}
		}()
	}
	detail("%s %s at %s in %s (up in %s)", cd.RuntimeName, cd.RuntimeVersion, cd.Endpoint, cd.Dir, time.Since(start).Round(time.Millisecond))

	if dir == "" {
		dir = cd.Dir
	}
	sock := filepath.Join(dir, "crishim.sock")
	say("Starting crishim in front of it")
	d, err := startCrishim(crishimBin, dir, cd, keep)
	if err != nil {
		return err
	}
	if !keep {
		defer stopCrishim(d)
	}
	detail("crishim --listen %s --runtime-endpoint %s (metrics on %s, log %s)", sock, cd.Endpoint, d.Metrics, filepath.Join(dir, "crishim.log"))

	if err := walk(ctx, ctlBin, d, cd); err != nil {
		return err
	}
	if _, cached, err := node.CachedBinaries(); err != nil {
		return err
	} else if cached || kube {
		if err := showKube(ctx, crishimBin, kubeNode); err != nil {
			return fmt.Errorf("kubectl chapter: %w", err)
		}
	} else {
		say("Skipping the kubectl chapter: its Kubernetes binaries are not built yet (make demo KUBE=1 builds them, as does make test)")
	}
	if keep {
		say("Left running (make demo-clean removes both)")
		fmt.Printf(`
  crishim socket:   unix://%[1]s
  runtime:          %[2]s
  metrics:          http://%[3]s/metrics

  crictl --runtime-endpoint unix://%[1]s ps
  %[4]s --endpoint unix://%[1]s status
  kubelet --container-runtime-endpoint unix://%[1]s ...
`, sock, cd.Endpoint, d.Metrics, ctlBin)
	}
	return nil
}

func say(format string, args ...any) {
	fmt.Printf("\n==> "+format+"\n", args...)
}

func detail(format string, args ...any) {
	fmt.Printf("    "+format+"\n", args...)
}

// runtimeBlurb says where the demo's runtime comes from.
func runtimeBlurb(r harness.Runtime) string {
	switch r {
	case harness.RuntimeContainerd:
		return "containerd v2.4 built from the Go module proxy, Debian's runc"
	case harness.RuntimeContainerd16:
		return "Debian's containerd 1.6 + runc"
	}
	return string(r)
}

// cleanKept stops kept demos' crishims, then their containerds.
func cleanKept() error {
	pidFiles, _ := filepath.Glob(filepath.Join(harness.BaseDir, "slot-*", crishimPidFile))
	for _, f := range pidFiles {
		if err := killRecorded(f); err != nil {
			fmt.Fprintln(os.Stderr, "demo:", err)
		}
	}
	removed, err := harness.TeardownDetached()
	for _, dir := range removed {
		fmt.Println("removed", dir)
	}
	if len(removed) == 0 && err == nil {
		fmt.Println("no kept demo found")
	}
	return err
}

// killRecorded stops the crishim whose pid (and socket) a kept demo wrote,
// after checking the pid still belongs to that crishim (pids are reused).
func killRecorded(pidFile string) error {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	pidText, sock, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		return fmt.Errorf("%s: %w", pidFile, err)
	}
	if sock == "" { // written before the socket was recorded: it was in the slot
		sock = filepath.Dir(pidFile)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), sock) {
		return os.Remove(pidFile) // already gone
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop crishim %d: %w", pid, err)
	}
	for range 100 {
		if syscall.Kill(pid, 0) != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Println("stopped crishim", pid)
	return os.Remove(pidFile)
}
