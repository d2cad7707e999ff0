package node

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/crishim/crishim/test/harness"
)

// state is what a node records in node.json: enough for a later process to reuse the node
// (`make node` twice), drive it, or tear it down.
type state struct {
	Index              int    `json:"index"`
	Name               string `json:"name"`
	NodeIP             string `json:"nodeIP"`
	Iface              string `json:"iface"`
	CgroupRoot         string `json:"cgroupRoot"`
	SlotDir            string `json:"slotDir"`            // the harness slot of the private containerd
	ContainerdEndpoint string `json:"containerdEndpoint"` // the runtime's CRI endpoint
	// Runtime runs behind crishim; ContainerdAddress is its containerd API socket ("" for a
	// runtime that is not containerd). Both empty in nodes that predate them: Debian's
	// containerd, whose API socket is the CRI endpoint's.
	Runtime            harness.Runtime `json:"runtime,omitempty"`
	ContainerdAddress  string          `json:"containerdAddress,omitempty"`
	CrishimSock        string          `json:"crishimSock"`
	CrishimMetrics     string          `json:"crishimMetrics"` // host:port
	CrishimArgs        []string        `json:"crishimArgs"`
	EtcdAddr           string          `json:"etcdAddr"`
	EtcdPeerAddr       string          `json:"etcdPeerAddr"`
	APIServerPort      int             `json:"apiserverPort"`
	KubeletPort        int             `json:"kubeletPort"`
	KubeletHealthzPort int             `json:"kubeletHealthzPort"`
	Kubeconfig         string          `json:"kubeconfig"`
	Version            string          `json:"version"` // Kubernetes release
	Bins               string          `json:"bins"`    // directory of the binaries
	// Systemd marks a systemd node (systemd.go); SystemdPID is its PID 1 as the host sees it.
	Systemd    bool `json:"systemd,omitempty"`
	SystemdPID int  `json:"systemdPID,omitempty"`
}

func readState(l layout) (state, error) {
	var s state
	b, err := os.ReadFile(l.path("node.json"))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", l.path("node.json"), err)
	}
	return s, nil
}

func writeState(l layout, s state) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(l.path("node.json"), b, 0o644); err != nil {
		return fmt.Errorf("write node state: %w", err)
	}
	return nil
}

// runtime is the node's runtime, for state written before it was recorded too.
func (s state) runtime() harness.Runtime {
	if s.Runtime == "" {
		return harness.RuntimeContainerd16
	}
	return s.Runtime
}

// containerdAddress is crishim's --containerd-address, for state written before it was
// recorded too.
func (s state) containerdAddress() string {
	if s.Runtime == "" {
		return strings.TrimPrefix(s.ContainerdEndpoint, "unix://")
	}
	return s.ContainerdAddress
}
