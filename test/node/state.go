package node

import (
	"encoding/json"
	"fmt"
	"os"
)

// state is what a node records in node.json: enough for a later process to reuse the node
// (`make node` twice), drive it, or tear it down.
type state struct {
	Index              int      `json:"index"`
	Name               string   `json:"name"`
	NodeIP             string   `json:"nodeIP"`
	Iface              string   `json:"iface"`
	CgroupRoot         string   `json:"cgroupRoot"`
	SlotDir            string   `json:"slotDir"` // the harness slot of the private containerd
	ContainerdEndpoint string   `json:"containerdEndpoint"`
	CrishimSock        string   `json:"crishimSock"`
	CrishimMetrics     string   `json:"crishimMetrics"` // host:port
	CrishimArgs        []string `json:"crishimArgs"`
	EtcdAddr           string   `json:"etcdAddr"`
	EtcdPeerAddr       string   `json:"etcdPeerAddr"`
	APIServerPort      int      `json:"apiserverPort"`
	KubeletPort        int      `json:"kubeletPort"`
	KubeletHealthzPort int      `json:"kubeletHealthzPort"`
	Kubeconfig         string   `json:"kubeconfig"`
	Version            string   `json:"version"` // Kubernetes release
	Bins               string   `json:"bins"`    // directory of the binaries
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
