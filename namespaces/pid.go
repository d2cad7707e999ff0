package namespaces

import (
	"encoding/json"
	"errors"
	"fmt"
)

// errNoPID means verbose container info carried no usable pid.
var errNoPID = errors.New("no pid in the runtime's verbose info")

// PIDFromVerboseInfo finds a container's init PID in the verbose info of a
// CRI ContainerStatus answer. containerd (and CRI-O) put a JSON document
// under "info" whose "pid" is the init process as seen from the host; it is
// the one runtime-neutral place a CRI client can learn it.
func PIDFromVerboseInfo(info map[string]string) (int, error) {
	raw, ok := info["info"]
	if !ok {
		return 0, fmt.Errorf("%w: no \"info\" key", errNoPID)
	}
	var doc struct {
		PID *int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(raw), &doc); err != nil {
		return 0, fmt.Errorf("%w: %w", errNoPID, err)
	}
	if doc.PID == nil || *doc.PID <= 0 {
		return 0, fmt.Errorf("%w: pid missing or zero (not running?)", errNoPID)
	}
	return *doc.PID, nil
}
