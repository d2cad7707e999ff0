package node

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/crishim/crishim/test/lockedbuf"
)

// KubectlInteract runs kubectl against the node with a shell on the other end, types line,
// waits (at most 2 minutes) for want in the output, then types exit, as a person at the
// prompt would: typing ahead and closing stdin at once can end the shell before its output
// has come back through attach. It returns stdout and stderr together.
func (n *Node) KubectlInteract(ctx context.Context, want, line string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.KubectlPath(), append([]string{"--kubeconfig", n.Kubeconfig}, args...)...)
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
