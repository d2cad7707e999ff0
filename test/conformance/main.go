// Command conformance runs critest, the CRI conformance suite of cri-tools, against a private
// runtime directly and then through crishim in front of it, and compares the two: crishim
// in front of a runtime must pass whatever the runtime passes. `make conformance RUNTIME=…`
// runs it (root: the harness starts the runtime).
//
// It prints a table of passed, failed and skipped specs per target and the specs that pass
// directly but fail through crishim, and exits 1 exactly when there is such a spec (2 when
// it could not compare at all).
//
// No registry is reachable from a test machine, so every image critest pulls is built from
// the host's busybox and served by a registry on loopback, to which the runtime's pulls of
// those registries are mirrored (images.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/crishim/crishim/test/crishimproc"
	"github.com/crishim/crishim/test/harness"
)

// errRegressions is the outcome that fails the run: specs that pass only directly.
var errRegressions = errors.New("specs pass directly but fail through crishim")

func main() {
	crishimBin := flag.String("crishim", "bin/crishim", "crishim binary to put in front of the runtime")
	runtimeName := flag.String("runtime", os.Getenv("RUNTIME"), "runtime behind crishim: containerd (the default), crio or containerd-1.6 (default $RUNTIME)")
	focus := flag.String("focus", "", "run only the critest specs matching this regular expression (ginkgo's -focus), e.g. 'Image Manager'; default all")
	out := flag.String("out", "", "directory for reports and logs (default "+filepath.Join(harness.BaseDir, "conformance", "<runtime>")+")")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, log, *crishimBin, *runtimeName, *focus, *out)
	stop()
	switch {
	case errors.Is(err, errRegressions):
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, log *slog.Logger, crishimBin, runtimeName, focus, out string) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: the harness starts a private runtime")
	}
	crishimBin, err := filepath.Abs(crishimBin)
	if err != nil {
		return fmt.Errorf("crishim binary: %w", err)
	}
	if _, err := os.Stat(crishimBin); err != nil {
		return fmt.Errorf("crishim binary (make build): %w", err)
	}
	if out == "" {
		rt, err := harness.ParseRuntime(runtimeName)
		if err != nil {
			return err
		}
		out = filepath.Join(harness.BaseDir, "conformance", string(rt))
	}
	if err := os.RemoveAll(out); err != nil {
		return fmt.Errorf("clear %s: %w", out, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", out, err)
	}

	critest, err := ensureCritest(ctx, log)
	if err != nil {
		return err
	}
	nnp, err := buildNNP(ctx, out)
	if err != nil {
		return err
	}
	reg, err := harness.ServeRegistry(ctx, critestImages(nnp))
	if err != nil {
		return err
	}
	defer reg.Close()

	log.Info("starting the runtime", "RUNTIME", runtimeName)
	cd, err := startRuntime(ctx, runtimeName, reg.Mirrors())
	if err != nil {
		return err
	}
	defer func() {
		if err := cd.Stop(); err != nil {
			log.Error("runtime teardown", "err", err)
		}
	}()
	shim, err := crishimproc.Start(crishimproc.Options{
		Binary:          crishimBin,
		Socket:          filepath.Join(out, "crishim.sock"),
		RuntimeEndpoint: cd.Endpoint,
		LogPath:         filepath.Join(out, "crishim.log"),
		Args:            crishimArgs(cd),
	})
	if err != nil {
		return err
	}
	defer func() { _ = shim.Stop() }()

	results := map[string]suiteResult{}
	for _, target := range []struct{ name, endpoint string }{
		{"direct", cd.Endpoint},
		{"crishim", shim.Endpoint},
	} {
		log.Info("running critest", "target", target.name, "endpoint", target.endpoint, "log", filepath.Join(out, "critest-"+target.name+".log"))
		start := time.Now()
		res, err := runCritest(ctx, critest, target.endpoint, focus, out, target.name)
		if err != nil {
			return err
		}
		log.Info("critest done", "target", target.name, "took", time.Since(start).Round(time.Second),
			"passed", res.count(passed), "failed", res.count(failed), "skipped", res.count(skipped))
		results[target.name] = res
	}

	c := compare(results["direct"], results["crishim"])
	title := fmt.Sprintf("critest %s against %s %s (RUNTIME=%s); reports and logs in %s",
		critestVersion, cd.RuntimeName, cd.RuntimeVersion, cd.Runtime, out)
	printReport(os.Stdout, title, results["direct"], results["crishim"], c)
	if len(c.Regressions) > 0 {
		return fmt.Errorf("%d %w", len(c.Regressions), errRegressions)
	}
	return nil
}
