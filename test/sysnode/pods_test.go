package sysnode

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/crishim/crishim/test/lockedbuf"
)

// runPod applies a pod manifest, waits until the pod is Ready and deletes it when the test
// ends, waiting until it is gone: the tests after it (restarts, purge) start on a quiet node.
func runPod(ctx context.Context, t *testing.T, name, manifest string) {
	t.Helper()
	if _, err := testNode.Kubectl(ctx, []byte(manifest), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := testNode.Kubectl(ctx, nil, "delete", "pod", name, "--wait=true", "--timeout=90s", "--ignore-not-found"); err != nil {
			t.Errorf("delete pod %s: %v", name, err)
		}
	})
	if _, err := testNode.Kubectl(ctx, nil, "wait", "--for=condition=Ready", "pod/"+name, "--timeout=120s"); err != nil {
		out, _ := testNode.Kubectl(ctx, nil, "describe", "pod", name)
		t.Fatalf("%v\n%s", err, out)
	}
}

// interact runs kubectl with a shell on the other end, types line, waits for want in the
// output, then types exit, as a person at the prompt would (typing ahead and closing stdin
// at once can end the shell before its output has come back through attach).
func interact(ctx context.Context, want, line string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testNode.KubectlPath(), append([]string{"--kubeconfig", testNode.Kubeconfig}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	var out lockedbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() { _ = cmd.Wait() }()
	defer stdin.Close()
	if _, err := io.WriteString(stdin, line+"\n"); err != nil {
		return out.String(), err
	}
	for !strings.Contains(out.String(), want) {
		select {
		case <-ctx.Done():
			return out.String(), fmt.Errorf("%q never appeared in the output", want)
		case <-time.After(100 * time.Millisecond):
		}
	}
	_, _ = io.WriteString(stdin, "exit\n")
	return out.String(), nil
}
