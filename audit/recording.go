package audit

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
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
	// MaxTotalBytes bounds the directory as a whole
	// (--record-max-total-bytes); 0 is no limit.
	MaxTotalBytes int64
	Input         bool // --record-input
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

// ErrRecordDirFull is why a recording is not started, or stopped: the
// recording directory holds --record-max-total-bytes.
var ErrRecordDirFull = errors.New("recording directory full (--record-max-total-bytes)")

// RecordBudget bounds what the recording directory holds as a whole, so
// that sessions, which anyone allowed to exec can open, cannot fill the
// file system under it. Nothing is ever deleted: once the directory is
// full, new sessions are not recorded and running recordings stop, each
// counted and logged, until an operator moves recordings away. A nil
// *RecordBudget bounds nothing.
//
// What recordings write is charged to a running total; the directory is
// measured (every file in it stat'ed: seconds for 100,000 recordings) at
// the first recording and then at most once per recordRescanEvery, at a
// recording's start, to learn what operators removed or others wrote.
type RecordBudget struct {
	dir string
	max int64
	now func() time.Time
	// used is the directory's size as last measured, plus what was
	// written since.
	used atomic.Int64
	// full says a write did not fit since the last measure: no new
	// recording until a measure finds room.
	full atomic.Bool

	mu       sync.Mutex
	scanned  time.Time // when the directory was last measured
	scans    int       // how often (tests)
	scanning bool
}

// recordRescanEvery bounds how often the recording directory is measured:
// recordings removed by an operator are room again within it.
const recordRescanEvery = time.Minute

// NewRecordBudget bounds dir to max bytes; nil when max is 0 (no limit).
func NewRecordBudget(dir string, max int64) *RecordBudget {
	if max <= 0 {
		return nil
	}
	return &RecordBudget{dir: dir, max: max, now: time.Now}
}

// Admit refuses a new recording once the directory is full (or a write did
// not fit in it), measuring it afresh when the last measure is older than
// recordRescanEvery. One
// recording's start measures; the others meanwhile use the running total.
func (b *RecordBudget) Admit() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	now := b.now()
	scan := !b.scanning && (b.scanned.IsZero() || now.Sub(b.scanned) >= recordRescanEvery)
	if scan {
		b.scanning, b.scans = true, b.scans+1
	}
	b.mu.Unlock()
	if scan {
		n, err := dirBytes(b.dir)
		b.mu.Lock()
		b.scanning = false
		if err == nil {
			b.scanned = now
			b.used.Store(n)
			b.full.Store(false)
		}
		b.mu.Unlock()
		if err != nil {
			return fmt.Errorf("--record-dir: %w", err)
		}
	}
	if n := b.used.Load(); n >= b.max || b.full.Load() {
		return fmt.Errorf("%w: %s holds %d bytes, the limit is %d", ErrRecordDirFull, b.dir, n, b.max)
	}
	return nil
}

// Writer charges what is written to w to the budget. A write that would
// take the directory past the limit fails whole, so the file ends with a
// complete line.
func (b *RecordBudget) Writer(w io.Writer) io.Writer {
	if b == nil {
		return w
	}
	return budgetWriter{w: w, b: b}
}

type budgetWriter struct {
	w io.Writer
	b *RecordBudget
}

// ErrRecordingDeleted is why a recording is lost though every write
// succeeded: its file was deleted while it was written (its directory
// removed), and what it held went with it.
var ErrRecordingDeleted = errors.New("recording deleted while it was written (its directory removed?); what it held is lost")

// deletedFile says whether w, a recording's file or a budget's writer of
// one, writes to a file that has no name left.
func deletedFile(w io.Writer) bool {
	switch w := w.(type) {
	case *os.File:
		return unlinked(w)
	case budgetWriter:
		return deletedFile(w.w)
	}
	return false
}

func (bw budgetWriter) Write(p []byte) (int, error) {
	n := int64(len(p))
	if bw.b.used.Add(n) > bw.b.max {
		bw.b.used.Add(-n)
		bw.b.full.Store(true)
		return 0, ErrRecordDirFull
	}
	return bw.w.Write(p)
}

// dirBytes is the size of the regular files in dir; a directory not made
// yet holds nothing.
func dirBytes(dir string) (int64, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var total int64
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if fi, err := e.Info(); err == nil { // removed meanwhile: nothing
			total += fi.Size()
		}
	}
	return total, nil
}
