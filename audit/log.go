package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crishim/crishim/regularfile"
	"github.com/crishim/crishim/warnlimit"
)

// Config is the audit flags, named as kube-apiserver's.
type Config struct {
	Path       string // --audit-log; "-" is stdout; empty disables
	MaxSizeMB  int    // --audit-log-maxsize: rotate past this many MiB
	MaxBackups int    // --audit-log-maxbackup: rotated files kept (0: all)
	MaxAgeDays int    // --audit-log-maxage: days rotated files are kept (0: forever)
	Required   bool   // --audit-required: no new sessions (and /readyz fails) while events cannot be written
	ExecSync   bool   // --audit-exec-sync
	CRICalls   string // --audit-cri-calls: CRICallsNone, CRICallsMutating or CRICallsAll
}

// The levels of --audit-cri-calls: which CRI and crishim.v1 calls of
// callers other than the kubelet are audited (the kubelet's never are).
const (
	CRICallsNone     = "none"
	CRICallsMutating = "mutating" // every call but those that only read (a verbose status read counts)
	CRICallsAll      = "all"
)

// CRICallsLevels lists the levels, for flags and errors.
var CRICallsLevels = []string{CRICallsNone, CRICallsMutating, CRICallsAll}

// Errors is what the log reports its write failures to (crishim_audit_errors_total).
type Errors interface{ AuditError() }

// Log is the audit log. A nil *Log records nothing.
type Log struct {
	cfg Config // Path, and the rest as opened
	log *slog.Logger
	// Reconfigure changes these while events are written.
	execSync, required atomic.Bool
	errs               Errors
	mu                 sync.Mutex // one line at a time, whole
	file               *logFile   // nil for stdout
	w                  io.Writer  // stdout, when file is nil
	broken             bool       // the last line was left part-written
	failing            atomic.Pointer[error]
	lostWarn           *warnlimit.Limit // "audit event not written"
}

// Open opens (creates, mode 0600) the log at cfg.Path; nil when disabled.
func Open(cfg Config, errs Errors, log *slog.Logger) (*Log, error) {
	if cfg.Path == "" {
		return nil, nil
	}
	l := &Log{cfg: cfg, log: log, errs: errs, lostWarn: warnlimit.New(lostWarnBurst, lostWarnInterval, nil)}
	l.execSync.Store(cfg.ExecSync)
	l.required.Store(cfg.Required)
	if cfg.Path == "-" {
		l.w = os.Stdout
		return l, nil
	}
	// Created now, so a path crishim cannot write is a startup error, and
	// made 0600 if it existed: the log names every shell opened on the node.
	f, err := openRegular(cfg.Path)
	if err != nil {
		return nil, fmt.Errorf("--audit-log: %w", err)
	}
	err = f.Chmod(0o600)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("--audit-log: %w", err)
	}
	l.file = newLogFile(cfg)
	return l, nil
}

// openRegular opens path for appending, creating it, and refuses anything
// but a regular file, without waiting on one (regularfile.Open).
func openRegular(path string) (*os.File, error) {
	f, err := regularfile.Open(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if nr := (*regularfile.NotRegularError)(nil); errors.As(err, &nr) {
		return nil, fmt.Errorf("%w; the audit log must be a file", err)
	}
	return f, err
}

// Reconfigure applies the settings that can change while the log is open:
// ExecSync, Required and MaxSizeMB. The others (the path, and the limits
// of rotated files) take a restart.
func (l *Log) Reconfigure(cfg Config) {
	if l == nil {
		return
	}
	l.execSync.Store(cfg.ExecSync)
	l.required.Store(cfg.Required)
	if l.file != nil {
		l.mu.Lock()
		l.file.maxBytes = rotateAt(cfg.MaxSizeMB)
		l.mu.Unlock()
	}
}

// ExecSync says whether ExecSync calls are audited.
func (l *Log) ExecSync() bool { return l != nil && l.execSync.Load() }

// Close closes the file.
func (l *Log) Close() error {
	if l == nil || l.file == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.file.close()
	return nil
}

// Ready fails while the last write failed, when events are required
// (--audit-required): a node that cannot audit should not take work.
func (l *Log) Ready(context.Context) error {
	if l == nil || !l.required.Load() {
		return nil
	}
	if err := l.failing.Load(); err != nil {
		return fmt.Errorf("audit log %s cannot be written: %w", l.cfg.Path, *err)
	}
	return nil
}

// Refusal says why a new session must be refused (--audit-required) before
// it is set up: the log's file could not take an event now (its directory is
// gone or not writable, the path is not a regular file, its file system has
// no space left). Nil when sessions may start; each session's own started
// event then has the last word (Session.Refused). A look at the file rather
// than at the last write's outcome: a refused session writes nothing, so
// that outcome would never change.
func (l *Log) Refusal() error {
	// stdout has no file to look at: the session's started event decides.
	if l == nil || !l.required.Load() || l.file == nil {
		return nil
	}
	if err := writable(l.cfg.Path); err != nil {
		return &RefusedError{Path: l.cfg.Path, Err: err}
	}
	return nil
}

// writable says whether an event could be appended to the file at path now,
// or the file be created.
func writable(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		path = filepath.Dir(path)
		err = unix.Access(path, unix.W_OK|unix.X_OK)
	case err != nil:
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("%s is not a regular file", path)
	default:
		err = unix.Access(path, unix.W_OK)
	}
	if err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return err
	}
	if st.Bavail == 0 {
		return unix.ENOSPC
	}
	return nil
}

// RefusedError is why a session was refused under --audit-required: its
// events cannot be written.
type RefusedError struct {
	Path string
	Err  error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("audit log %s cannot be written (%v); --audit-required refuses new sessions until it can", e.Path, e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

func (l *Log) write(ev *Event) error {
	b, err := json.Marshal(ev)
	if err != nil {
		err = fmt.Errorf("encode: %w", err)
		l.failed(ev, err)
		return err
	}
	b = append(b, '\n')
	l.mu.Lock()
	err = l.writeLine(b)
	l.mu.Unlock()
	if err != nil {
		l.failed(ev, err)
		return err
	}
	if prev := l.failing.Swap(nil); prev != nil {
		l.log.Info("audit log writable again", "path", l.cfg.Path)
	}
	return nil
}

// writeLine writes one event's line, whole or not at all (logFile's
// writeLine, or stdout's). Called with l.mu held.
func (l *Log) writeLine(b []byte) error {
	if l.broken {
		b = append([]byte{'\n'}, b...)
	}
	if l.file == nil { // stdout
		n, err := l.w.Write(b)
		l.broken = err != nil && n > 0 && n < len(b)
		return err
	}
	broken, err := l.file.writeLine(b, func() {
		l.log.Info("audit log path names another file (rotated or deleted); reopening it", "path", l.cfg.Path)
	})
	l.broken = broken
	return err
}

// cutBack truncates the file at path to start, removing n bytes of a line
// written part-way, if the file is what was written: start+n bytes long.
func cutBack(path string, start, n int64) bool {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != start+n {
		return false
	}
	return os.Truncate(path, start) == nil
}

// Reopen makes the next event open the path anew (SIGHUP): the file a
// rotation left there, or a new one.
func (l *Log) Reopen() {
	if l == nil || l.file == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.file.close()
}

// Lost events are logged at most lostWarnBurst per lostWarnInterval: on a
// full disk under load every event fails (tens of thousands a second), and
// crishim_audit_errors_total counts each one.
const (
	lostWarnBurst    = 10
	lostWarnInterval = time.Minute
)

// failed never drops an event silently: it is counted, logged with what it
// said (never more than the event holds: no token, no stream data; past
// the rate limit only counted, the next line logged saying how many were
// left out), and makes crishim unready when required.
func (l *Log) failed(ev *Event, err error) {
	l.errs.AuditError()
	l.failing.Store(&err)
	ok, suppressed := l.lostWarn.Allow()
	if !ok {
		return
	}
	if suppressed > 0 {
		l.log.Warn("audit events not written and not logged (rate limit); crishim_audit_errors_total counts them all",
			"path", l.cfg.Path, "suppressed", suppressed, "logged_per_interval", l.lostWarn.Burst(), "interval", l.lostWarn.Interval())
	}
	l.log.Warn("audit event not written", "path", l.cfg.Path, "err", err,
		"id", ev.ID, "stage", ev.Stage, "kind", ev.Kind, "container_id", ev.ContainerID, "pod_sandbox_id", ev.PodSandboxID)
}

// Session is one audited session between its two events.
type Session struct {
	l       *Log
	start   Event
	refused error // the started event was not written and events are required
}

// Start writes ev as a session's started event, with a fresh ID and the
// time, and returns the session to End. Nil (and a no-op End) without a log.
// Under --audit-required a session whose started event could not be written
// is refused: Refused says why, and End writes nothing.
func (l *Log) Start(ev Event) *Session {
	if l == nil {
		return nil
	}
	ev.ID = newID()
	ev.Time = time.Now().UTC()
	ev.Stage = StageStarted
	s := &Session{l: l, start: ev}
	if err := l.write(&ev); err != nil && l.required.Load() {
		s.refused = &RefusedError{Path: l.cfg.Path, Err: err}
	}
	return s
}

// Refused is nil, or why the session must not go on (--audit-required and
// its started event could not be written): a *RefusedError.
func (s *Session) Refused() error {
	if s == nil {
		return nil
	}
	return s.refused
}

// End writes the ended event: the started event's fields, the duration,
// and what fill adds (bytes, exit code, error). Nothing for a refused
// session, which never began.
func (s *Session) End(fill func(*Event)) {
	if s == nil || s.refused != nil {
		return
	}
	ev := s.start
	ev.Time = time.Now().UTC()
	ev.Stage = StageEnded
	ev.DurationSeconds = Ptr(ev.Time.Sub(s.start.Time).Seconds())
	if fill != nil {
		fill(&ev)
	}
	_ = s.l.write(&ev) // counted and logged there
}

// Update changes the started event's fields that the ended one repeats
// (learned during the session: the container a create made).
func (s *Session) Update(fill func(*Event)) {
	if s != nil {
		fill(&s.start)
	}
}

// ID is the session's ID ("" without a log).
func (s *Session) ID() string {
	if s == nil {
		return ""
	}
	return s.start.ID
}

func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(errors.Join(errors.New("crypto/rand"), err)) // never happens on Linux
	}
	return hex.EncodeToString(b[:])
}

// CRICalls is the --audit-cri-calls level; CRICallsNone without a log.
func (l *Log) CRICalls() string {
	if l == nil || l.cfg.CRICalls == "" {
		return CRICallsNone
	}
	return l.cfg.CRICalls
}
