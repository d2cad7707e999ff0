package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// NotifierAnnotationPrefix starts the pod annotations that declare
// notifiers: notifier.crishim.io/<container>.<name> = JSON. Pod owners write
// them; crishim only reads them, at Notify time, so a malformed one never
// stands in the way of creating the pod.
const NotifierAnnotationPrefix = "notifier.crishim.io/"

// defaultNotifierTimeout applies when the annotation has no timeoutSeconds.
const defaultNotifierTimeout = time.Second

// maxNotifierTimeoutSeconds bounds timeoutSeconds. A notifier is a nudge
// (reload, flush, checkpoint) and Notify waits for it, holding the caller's
// call and a slot of notifyParallel: an hour is far beyond any such action,
// and keeps the conversion to a time.Duration far from overflowing (from
// 9223372037 s on it would wrap negative).
const maxNotifierTimeoutSeconds = 3600

// notifierSpec is the annotation's JSON.
type notifierSpec struct {
	Exec           []string `json:"exec,omitempty"`
	Signal         string   `json:"signal,omitempty"`
	TimeoutSeconds *int64   `json:"timeoutSeconds,omitempty"`
	Probe          *struct {
		Exec []string `json:"exec"`
	} `json:"probe,omitempty"`
}

// notifier is one checked declaration.
type notifier struct {
	exec    []string // the action: a command run with ExecSync ...
	signal  signal   // ... or a signal, when exec is empty
	timeout time.Duration
	probe   []string // empty: no probe
}

func (n notifier) action() string {
	if len(n.exec) > 0 {
		return "exec"
	}
	return "signal"
}

// declaration is what a pod's annotations say about one notifier of one
// container: a notifier, or why the annotation is unusable.
type declaration struct {
	container string
	key       string
	notifier  notifier
	err       error
}

// declarations finds the containers of a pod that declare notifier name, in
// the pod's annotations.
func declarations(annotations map[string]string, name string) []declaration {
	var out []declaration
	for key, value := range annotations {
		rest, ok := strings.CutPrefix(key, NotifierAnnotationPrefix)
		if !ok {
			continue
		}
		// Container names are DNS labels, without dots; the notifier's
		// name is everything after the first one.
		container, notifierName, ok := strings.Cut(rest, ".")
		if !ok || notifierName != name || container == "" {
			continue
		}
		n, err := parseNotifier(value)
		if err != nil {
			err = fmt.Errorf("annotation %s: %w", key, err)
		}
		out = append(out, declaration{container: container, key: key, notifier: n, err: err})
	}
	return out
}

// parseNotifier checks a notifier annotation's value. Unknown fields are
// errors: a misspelt "timeoutSecond" must not silently mean 1 s.
func parseNotifier(value string) (notifier, error) {
	var spec notifierSpec
	dec := json.NewDecoder(strings.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return notifier{}, fmt.Errorf("not a notifier (JSON {\"exec\":[...]} or {\"signal\":\"SIGHUP\"}): %w", err)
	}
	if dec.More() {
		return notifier{}, errors.New("not a notifier: more than one JSON value")
	}
	var n notifier
	switch {
	case len(spec.Exec) > 0 && spec.Signal != "":
		return n, errors.New("both exec and signal: a notifier has one action")
	case len(spec.Exec) > 0:
		n.exec = spec.Exec
	case spec.Signal != "":
		sig, err := parseSignal(spec.Signal)
		if err != nil {
			return n, fmt.Errorf("signal: %w", err)
		}
		n.signal = sig
	default:
		return n, errors.New("no action: give exec (a command) or signal")
	}
	n.timeout = defaultNotifierTimeout
	if spec.TimeoutSeconds != nil {
		if s := *spec.TimeoutSeconds; s < 1 || s > maxNotifierTimeoutSeconds {
			return n, fmt.Errorf("timeoutSeconds: %d is out of range 1..%d", s, maxNotifierTimeoutSeconds)
		}
		n.timeout = time.Duration(*spec.TimeoutSeconds) * time.Second
	}
	if spec.Probe != nil {
		if len(spec.Probe.Exec) == 0 {
			return n, errors.New("probe: no exec command")
		}
		n.probe = spec.Probe.Exec
	}
	return n, nil
}
