package audit

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// RecordMode is which exec and attach sessions are recorded
// (--record-sessions, and the pod annotation RecordAnnotation).
type RecordMode string

// Record modes, weakest first.
const (
	RecordNone RecordMode = "none"
	RecordTTY  RecordMode = "tty" // sessions with a terminal
	RecordAll  RecordMode = "all" // every exec and attach
)

// RecordAnnotation is the pod annotation by which a pod's owner asks for
// its sessions to be recorded (tty or all) when the node does not.
const RecordAnnotation = "crishim.io/record-sessions"

// ParseRecordMode reads a flag's or an annotation's value.
func ParseRecordMode(s string) (RecordMode, error) {
	switch m := RecordMode(s); m {
	case RecordNone, RecordTTY, RecordAll:
		return m, nil
	}
	return "", fmt.Errorf("%q: want none, tty or all", s)
}

// Stronger is the mode recording more of m and o: a pod may ask for more
// than the node, never for less.
func (m RecordMode) Stronger(o RecordMode) RecordMode {
	rank := map[RecordMode]int{RecordTTY: 1, RecordAll: 2}
	if rank[o] > rank[m] {
		return o
	}
	return m
}

// Records reports whether a session with or without a TTY is recorded.
func (m RecordMode) Records(tty bool) bool {
	return m == RecordAll || (m == RecordTTY && tty)
}

// RecordConfig is the recording flags.
type RecordConfig struct {
	Mode     RecordMode // --record-sessions
	Dir      string     // --record-dir
	MaxBytes int64      // --record-max-bytes per session; 0 is no limit
	Input    bool       // --record-input
}

// RecordErrors is what recordings report their write failures to
// (crishim_record_errors_total).
type RecordErrors interface{ RecordError() }

// CreateRecording creates a session's file, <dir>/<time>-<id>.cast, mode
// 0600 in a directory made 0700 if missing: recordings show whatever the
// terminal showed.
func CreateRecording(dir, id string, t time.Time) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("--record-dir: %w", err)
	}
	path := filepath.Join(dir, t.UTC().Format("20060102T150405Z")+"-"+id+".cast")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create recording: %w", err)
	}
	return f, nil
}

// NewID is a fresh session ID, as audit events carry.
func NewID() string { return newID() }
