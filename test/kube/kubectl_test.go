package kube

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// busybox is the offline image every pod of these tests runs.
const busybox = "docker.io/library/busybox:latest"

var nameSeq int

// uniqueName gives each object of a run its own name, so tests never see each other's pods.
func uniqueName(prefix string) string {
	nameSeq++
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid()%10000, nameSeq)
}

// kubectl runs kubectl with env added to its environment and stdin (may be nil), and returns
// stdout, stderr and the exit code (-1 if it could not run).
func kubectlEnv(t *testing.T, env []string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testNode.KubectlPath(), append([]string{"--kubeconfig", testNode.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code = 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
	}
	return out.String(), errb.String(), code
}

// kubectl runs kubectl and fails the test unless it exits 0.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := kubectlEnv(t, nil, "", args...)
	if code != 0 {
		t.Fatalf("kubectl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// apply creates the objects of a manifest and deletes them when the test ends.
func apply(t *testing.T, manifest string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "manifest-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(manifest); err != nil {
		t.Fatal(err)
	}
	f.Close()
	kubectl(t, "apply", "-f", f.Name())
	t.Cleanup(func() {
		_, _, _ = kubectlEnv(t, nil, "", "delete", "--ignore-not-found", "--wait=false", "-f", f.Name())
	})
}

// podManifest renders a pod labelled app=name with one busybox container per name/script
// pair; meta and spec are extra YAML lines for metadata and spec (indented two spaces).
func podManifest(name, meta, spec string, containers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  labels:\n    app: %s\n", name, name)
	b.WriteString(meta)
	b.WriteString("spec:\n  terminationGracePeriodSeconds: 5\n")
	b.WriteString(spec)
	b.WriteString("  containers:\n")
	for i := 0; i+1 < len(containers); i += 2 {
		fmt.Fprintf(&b, "  - name: %s\n    image: %s\n    imagePullPolicy: IfNotPresent\n    command: [\"sh\", \"-c\", %q]\n", containers[i], busybox, containers[i+1])
	}
	return b.String()
}

// waitReady waits until the pod is Ready, with kubectl as a user would.
func waitReady(t *testing.T, pod string) {
	t.Helper()
	kubectl(t, "wait", "--for=condition=Ready", "pod/"+pod, "--timeout=120s")
}

// getPod reads a pod through the API.
func getPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := testNode.Clientset.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return p
}

// eventually polls f until it returns nil or timeout passes; the error is f's last.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// metric returns the value of one sample of crishim's /metrics, e.g.
// `crishim_stream_sessions_total{kind="exec"}`, or 0 if crishim has not exported it yet.
func metric(t *testing.T, sample string) float64 {
	t.Helper()
	resp, err := http.Get(testNode.CrishimMetrics + "/metrics")
	if err != nil {
		t.Fatalf("scrape crishim: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatalf("metric %s: %v", sample, err)
			}
			return v
		}
	}
	return 0
}

// metricGrowth snapshots one sample of crishim's metrics; the returned func says how much it
// has grown since: how tests prove that something went through crishim.
func metricGrowth(t *testing.T, sample string) func() float64 {
	t.Helper()
	before := metric(t, sample)
	return func() float64 {
		t.Helper()
		return metric(t, sample) - before
	}
}

// readAll is io.ReadAll for a test.
func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
