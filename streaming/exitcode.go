package streaming

import (
	"encoding/json"
	"strconv"
)

// errorStreamMax bounds what is kept of the error stream: a v4 status is a
// few hundred bytes.
const errorStreamMax = 4 << 10

// exitStatus keeps an exec's error stream, where the runtime writes a
// metav1.Status (remotecommand v4), to find its exit code for the audit
// log.
type exitStatus struct {
	status []byte
}

func (e *exitStatus) data(typ string, p []byte) {
	if typ == "error" && len(e.status)+len(p) <= errorStreamMax {
		e.status = append(e.status, p...)
	}
}

// parseExitStatus reads remotecommand v4's metav1.Status: Success is 0,
// NonZeroExitCode carries the code as its ExitCode cause. An empty error
// stream (older protocols end it empty on success) says nothing.
func parseExitStatus(b []byte) (int32, bool) {
	var st struct {
		Status  string `json:"status"`
		Reason  string `json:"reason"`
		Details struct {
			Causes []struct {
				Reason  string `json:"reason"`
				Message string `json:"message"`
			} `json:"causes"`
		} `json:"details"`
	}
	if len(b) == 0 || json.Unmarshal(b, &st) != nil {
		return 0, false
	}
	if st.Status == "Success" {
		return 0, true
	}
	if st.Reason != "NonZeroExitCode" {
		return 0, false
	}
	for _, c := range st.Details.Causes {
		if c.Reason == "ExitCode" {
			if n, err := strconv.ParseInt(c.Message, 10, 32); err == nil {
				return int32(n), true
			}
		}
	}
	return 0, false
}
