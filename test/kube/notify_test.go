package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestNotifiersOnTheNode: notifiers declared in a kubelet-created pod's annotations run with
// `crishimctl notify` on the node: an exec action and a signal the app traps.
func TestNotifiersOnTheNode(t *testing.T) {
	pod := uniqueName("notify")
	meta := `  annotations:
    notifier.crishim.io/app.quiesce: '{"exec":["sh","-c","echo quiesced > /tmp/quiesced"],"timeoutSeconds":20,"probe":{"exec":["test","-f","/tmp/quiesced"]}}'
    notifier.crishim.io/app.reload: '{"signal":"SIGHUP"}'
`
	apply(t, podManifest(pod, meta, "", "app", `trap "echo got HUP > /tmp/hup" HUP; while :; do sleep 1 & wait $!; done`))
	waitReady(t, pod)
	for _, name := range []string{"quiesce", "reload"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		out, err := exec.CommandContext(ctx, filepath.Join(binDir, "crishimctl"), "--endpoint", testNode.CrishimEndpoint(),
			"notify", "--selector", "app="+pod, "-o", "json", name).CombinedOutput()
		cancel()
		var resp struct {
			Pods []struct {
				PodName    string `json:"podName"`
				Containers []struct {
					ContainerName string `json:"containerName"`
					Succeeded     bool   `json:"succeeded"`
				} `json:"containers"`
			} `json:"pods"`
		}
		if err != nil || json.Unmarshal(out, &resp) != nil || len(resp.Pods) != 1 || resp.Pods[0].PodName != pod ||
			len(resp.Pods[0].Containers) != 1 || !resp.Pods[0].Containers[0].Succeeded {
			t.Errorf("crishimctl notify --selector app=%s -o json %s: %v\n%s", pod, name, err, out)
		}
	}
	eventually(t, 30*time.Second, func() error {
		out, errOut, code := kubectlEnv(t, nil, "", "exec", pod, "-c", "app", "--", "cat", "/tmp/quiesced", "/tmp/hup")
		if code != 0 || out != "quiesced\ngot HUP\n" {
			return fmt.Errorf("the notifiers' effects in the container: exit %d %q %s", code, out, errOut)
		}
		return nil
	})
}
