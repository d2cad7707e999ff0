package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/crishim/crishim/caller"
)

// Kinds of session.
const (
	KindExec        = "exec"
	KindAttach      = "attach"
	KindPortForward = "portforward"
	KindExecSync    = "execSync"
	KindDebug       = "debugContainer"
	KindSignal      = "signal"
	KindNotify      = "notify"
	// KindCRICall is a CRI or crishim.v1 call made by something other
	// than the kubelet (--audit-cri-calls).
	KindCRICall = "criCall"
)

// Stages: every session has one started and one ended event.
const (
	StageStarted = "started"
	StageEnded   = "ended"
)

// Event is one line of the audit log. Field names are lowerCamelCase, as in
// kube-apiserver's audit events; empty fields are left out.
type Event struct {
	Time  time.Time `json:"time"`
	ID    string    `json:"id"`
	Stage string    `json:"stage"`
	Kind  string    `json:"kind"`

	PodNamespace  string   `json:"podNamespace,omitempty"`
	PodName       string   `json:"podName,omitempty"`
	PodUID        string   `json:"podUID,omitempty"`
	PodSandboxID  string   `json:"podSandboxID,omitempty"`
	ContainerName string   `json:"containerName,omitempty"`
	ContainerID   string   `json:"containerID,omitempty"`
	Image         string   `json:"image,omitempty"`
	TargetID      string   `json:"targetContainerID,omitempty"`
	Argv          []string `json:"argv,omitempty"`
	TTY           bool     `json:"tty,omitempty"`
	Stdin         bool     `json:"stdin,omitempty"`
	Ports         []int32  `json:"ports,omitempty"`
	Signal        string   `json:"signal,omitempty"`
	Notifier      string   `json:"notifier,omitempty"`
	ClientAddress string   `json:"clientAddress,omitempty"`
	// Method is the full gRPC method of a criCall event.
	Method string `json:"method,omitempty"`
	// Caller is the process on the node that made the call (for a
	// streaming session: the CRI call that obtained its URL). Absent when
	// crishim made it itself.
	Caller *caller.Process `json:"caller,omitempty"`

	// Set on the ended event.
	DurationSeconds *float64 `json:"durationSeconds,omitempty"`
	BytesToRuntime  *int64   `json:"bytesToRuntime,omitempty"`
	BytesToClient   *int64   `json:"bytesToClient,omitempty"`
	ExitCode        *int32   `json:"exitCode,omitempty"`
	Code            string   `json:"code,omitempty"` // gRPC code of a CRI or crishim.v1 call
	Error           string   `json:"error,omitempty"`
	Recording       string   `json:"recording,omitempty"`
}

// Ptr is a field value of the ended event.
func Ptr[T any](v T) *T { return &v }

// Decode reads an audit log's lines back (tools, tests).
func Decode(r io.Reader) ([]Event, error) {
	var evs []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return evs, fmt.Errorf("audit log line %d: %w", n, err)
		}
		evs = append(evs, ev)
	}
	return evs, sc.Err()
}
