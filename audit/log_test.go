package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/crishim/crishim/warnlimit"
)

type countErrors struct{ n int }

func (c *countErrors) AuditError() { c.n++ }

func readEvents(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestStartEnd: a session is two lines sharing an ID, lowerCamelCase, the
// end carrying duration, bytes and exit code; the file is 0600.
func TestStartEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Open(Config{Path: path, MaxSizeMB: 1}, &countErrors{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := l.Start(Event{Kind: KindExec, PodNamespace: "ns", PodName: "web", ContainerID: "c1", Argv: []string{"sh"}, TTY: true, ClientAddress: "127.0.0.1:5"})
	s.End(func(ev *Event) {
		ev.BytesToRuntime, ev.BytesToClient, ev.ExitCode = Ptr(int64(10)), Ptr(int64(20)), Ptr(int32(3))
	})
	evs := readEvents(t, path)
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2", len(evs))
	}
	start, end := evs[0], evs[1]
	if start["id"] == "" || start["id"] != end["id"] || start["stage"] != "started" || end["stage"] != "ended" {
		t.Errorf("events %v / %v: want one id, started then ended", start, end)
	}
	for k, want := range map[string]any{"kind": "exec", "podNamespace": "ns", "podName": "web", "containerID": "c1", "tty": true, "clientAddress": "127.0.0.1:5"} {
		if start[k] != want || end[k] != want {
			t.Errorf("%s: %v / %v, want %v in both", k, start[k], end[k], want)
		}
	}
	for k, want := range map[string]any{"bytesToRuntime": 10.0, "bytesToClient": 20.0, "exitCode": 3.0} {
		if end[k] != want {
			t.Errorf("end %s = %v, want %v", k, end[k], want)
		}
		if _, ok := start[k]; ok {
			t.Errorf("start has %s", k)
		}
	}
	if _, ok := end["durationSeconds"]; !ok {
		t.Error("end lacks durationSeconds")
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}

type failingWriter struct{ err error }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	return len(p), nil
}

// TestWriteFailures: a failed write is counted, and makes /readyz fail
// when the log is required, until a write succeeds again.
func TestWriteFailures(t *testing.T) {
	for _, required := range []bool{false, true} {
		errs := &countErrors{}
		fw := &failingWriter{err: errors.New("no space left on device")}
		l := &Log{cfg: Config{Path: "/x"}, errs: errs, log: slog.New(slog.DiscardHandler), w: fw}
		l.Reconfigure(Config{Path: "/x", Required: required})
		l.Start(Event{Kind: KindSignal}).End(nil)
		// Required, the session is refused at its start and has no ended event.
		if want := map[bool]int{false: 2, true: 1}[required]; errs.n != want {
			t.Errorf("required=%v: %d errors counted, want %d", required, errs.n, want)
		}
		err := l.Ready(context.Background())
		if required != (err != nil) || (err != nil && !strings.Contains(err.Error(), "no space left")) {
			t.Errorf("required=%v: Ready = %v", required, err)
		}
		fw.err = nil
		l.Start(Event{Kind: KindSignal})
		if err := l.Ready(context.Background()); err != nil {
			t.Errorf("Ready after a good write: %v", err)
		}
	}
}

func TestNilLog(t *testing.T) {
	var l *Log
	l.Start(Event{}).End(nil)
	if l.ExecSync() || l.Ready(context.Background()) != nil || l.Close() != nil {
		t.Error("a nil log does something")
	}
	if l, err := Open(Config{}, nil, nil); l != nil || err != nil {
		t.Errorf("Open with no path = %v, %v", l, err)
	}
	if _, err := Open(Config{Path: "/nonexistent/dir/audit.log"}, nil, nil); err == nil || !strings.Contains(err.Error(), "--audit-log") {
		t.Errorf("Open of an unwritable path = %v, want a --audit-log error", err)
	}
}

// TestReconfigure: exec sync, required and the rotation size change on an
// open log.
func TestReconfigure(t *testing.T) {
	l, err := Open(Config{Path: filepath.Join(t.TempDir(), "audit.log"), MaxSizeMB: 100}, &countErrors{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Reconfigure(Config{ExecSync: true, Required: true, MaxSizeMB: 7})
	if !l.ExecSync() || !l.required.Load() || l.file.maxBytes != 7*megabyte {
		t.Errorf("after Reconfigure: exec sync %v, required %v, max size %d", l.ExecSync(), l.required.Load(), l.file.maxBytes)
	}
	l.Reconfigure(Config{})
	if l.ExecSync() || l.required.Load() {
		t.Errorf("after Reconfigure back: exec sync %v, required %v", l.ExecSync(), l.required.Load())
	}
}

// --audit-log-maxsize 0 means never rotate, also after a reload (lumberjack,
// which crishim used before, read 0 as 100 MB).
func TestMaxSizeZeroNeverRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l, err := Open(Config{Path: path, MaxSizeMB: 0}, &countErrors{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Reconfigure(Config{MaxSizeMB: 0})
	if err := os.Truncate(path, 101<<20); err != nil { // sparse: 101 MiB that take no space
		t.Fatal(err)
	}
	l.Start(Event{Kind: KindSignal})
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 {
		t.Errorf("after 101 MiB with --audit-log-maxsize 0: %d files, want the log alone", len(files))
	}
}

// TestOpenRefusesNonRegular: a FIFO (which would block the open until a
// reader came), a directory and a device are refused at once, naming the
// path; nothing waits.
func TestOpenRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, dir, "/dev/null"} {
		done := make(chan error, 1)
		go func() {
			l, err := Open(Config{Path: path}, &countErrors{}, slog.New(slog.DiscardHandler))
			if err == nil {
				l.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "regular file") {
				t.Errorf("Open(%s) = %v, want a refusal naming it as not a regular file", path, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("Open(%s) blocks", path)
		}
	}
}

// TestShortWriteLeavesNoFragment: a write that fails part-way (the file
// size limit stands in for a full disk: the kernel writes what fits, then
// EFBIG) is counted and leaves no fragment: every line of the file is a
// whole event, and the next event is a line of its own.
func TestShortWriteLeavesNoFragment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	errs := &countErrors{}
	l, err := Open(Config{Path: path}, errs, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Start(Event{Kind: KindSignal, ContainerID: "first"})
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	// Room for a part of the next line only. Go ignores SIGXFSZ.
	lim := old
	lim.Cur = uint64(fi.Size()) + 20
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	l.Start(Event{Kind: KindSignal, ContainerID: "lost"})
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if errs.n != 1 {
		t.Errorf("%d errors counted, want 1", errs.n)
	}
	l.Start(Event{Kind: KindSignal, ContainerID: "third"})
	evs := readEvents(t, path) // fails on a line that is not one event
	var ids []any
	for _, ev := range evs {
		ids = append(ids, ev["containerID"])
	}
	if len(evs) != 2 || ids[0] != "first" || ids[1] != "third" {
		t.Errorf("events %v, want first and third", ids)
	}
}

// TestReopenWhenMoved: when the path no longer names the file being written
// (renamed or deleted by logrotate without copytruncate), the next event
// goes to a new file at the path, not to the old inode; a path that became
// something other than a regular file is not written and the event counted.
func TestReopenWhenMoved(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	errs := &countErrors{}
	l, err := Open(Config{Path: path, MaxSizeMB: 100}, errs, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ids := func(path string) []any {
		var out []any
		for _, ev := range readEvents(t, path) {
			out = append(out, ev["containerID"])
		}
		return out
	}
	l.Start(Event{Kind: KindSignal, ContainerID: "a"})
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	l.Start(Event{Kind: KindSignal, ContainerID: "b"})
	if err := os.Remove(path); err != nil {
		t.Fatalf("no new file at the path after a rename: %v", err)
	}
	l.Start(Event{Kind: KindSignal, ContainerID: "c"})
	if got := fmt.Sprint(ids(path + ".1")); got != "[a]" {
		t.Errorf("the renamed file holds %s, want [a]", got)
	}
	if got := fmt.Sprint(ids(path)); got != "[c]" {
		t.Errorf("the path holds %s, want [c] (b went to the deleted file)", got)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("reopened file: %v, %v; want mode 0600", fi, err)
	}
	// SIGHUP's Reopen: a copy put in place of the file is written next.
	if err := os.Rename(path, path+".2"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l.Reopen()
	l.Start(Event{Kind: KindSignal, ContainerID: "d"})
	if got := fmt.Sprint(ids(path)); got != "[d]" {
		t.Errorf("after Reopen the path holds %s, want [d]", got)
	}
	if errs.n != 0 {
		t.Errorf("%d errors counted, want none", errs.n)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	l.Start(Event{Kind: KindSignal, ContainerID: "e"})
	if errs.n != 1 {
		t.Errorf("an event for a FIFO at the path: %d errors counted, want 1", errs.n)
	}
}

// TestRequiredRefusesSessions: with --audit-required, a session whose started event
// cannot be written is refused (an error naming the log and the cause) and writes no
// ended event; Refusal refuses new sessions up front while the cause stays, and lets
// them through once it is gone. Without --audit-required nothing is refused.
func TestRequiredRefusesSessions(t *testing.T) {
	for _, required := range []bool{false, true} {
		errs := &countErrors{}
		l := &Log{cfg: Config{Path: "/x"}, errs: errs, log: slog.New(slog.DiscardHandler), w: &failingWriter{err: errors.New("no space left on device")}}
		l.Reconfigure(Config{Path: "/x", Required: required})
		s := l.Start(Event{Kind: KindSignal})
		err := s.Refused()
		var refused *RefusedError
		if required != errors.As(err, &refused) || required && (!strings.Contains(err.Error(), "/x") || !strings.Contains(err.Error(), "no space left")) {
			t.Errorf("required=%v: Refused() = %v", required, err)
		}
		s.End(nil)
		if want := map[bool]int{false: 2, true: 1}[required]; errs.n != want {
			t.Errorf("required=%v: %d write errors, want %d (no ended event for a refused session)", required, errs.n, want)
		}
	}

	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(Config{Path: path, Required: true}, &countErrors{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Refusal(); err != nil {
		t.Fatalf("Refusal with a writable log: %v", err)
	}
	// The path becomes a directory: nothing can be written there.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(Event{Kind: KindSignal}).Refused(); err == nil {
		t.Fatal("a session whose started event was not written was not refused")
	}
	if err := l.Refusal(); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "regular file") {
		t.Errorf("Refusal while the path is a directory = %v, want one naming it", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := l.Refusal(); err != nil {
		t.Errorf("Refusal once the log can be created again: %v", err)
	}
	if err := l.Start(Event{Kind: KindSignal}).Refused(); err != nil {
		t.Errorf("session refused once the log can be written: %v", err)
	}
	if err := l.Refusal(); err != nil {
		t.Errorf("Refusal after a good write: %v", err)
	}
}

// TestDeletedDirectoryComesBack0700: the log's directory, deleted, is made
// again 0700 (as the unit's LogsDirectoryMode), not 0755: the log names every
// shell opened on the node.
func TestDeletedDirectoryComesBack0700(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "crishim")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "audit.log")
	errs := &countErrors{}
	l, err := Open(Config{Path: path}, errs, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Start(Event{Kind: KindSignal, ContainerID: "a"})
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	l.Start(Event{Kind: KindSignal, ContainerID: "b"})
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 || errs.n != 0 {
		t.Fatalf("directory after its deletion: %v (%v), %d errors; want mode 0700", fi, err, errs.n)
	}
	if got := fmt.Sprint(lines(t, path)); got != "[b]" {
		t.Errorf("the path holds %s, want [b]", got)
	}
}

// countHandler counts the records logged, by message.
type countHandler struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Message]++
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }

// TestLostEventsLoggedAtARate: on a full disk every event fails; each is
// counted, but only lostWarnBurst a minute are logged, and the next line
// logged says how many were not.
func TestLostEventsLoggedAtARate(t *testing.T) {
	h := &countHandler{n: map[string]int{}}
	errs := &countErrors{}
	now := time.Unix(1000, 0)
	l := &Log{cfg: Config{Path: "/x"}, errs: errs, log: slog.New(h), w: &failingWriter{err: syscall.ENOSPC},
		lostWarn: warnlimit.New(lostWarnBurst, lostWarnInterval, func() time.Time { return now })}
	for range 1000 {
		l.Start(Event{Kind: KindSignal})
	}
	now = now.Add(lostWarnInterval)
	l.Start(Event{Kind: KindSignal})
	const notWritten, notLogged = "audit event not written", "audit events not written and not logged (rate limit); crishim_audit_errors_total counts them all"
	if errs.n != 1001 || h.n[notWritten] != lostWarnBurst+1 || h.n[notLogged] != 1 {
		t.Errorf("1001 events lost: %d counted, logged %v; want 1001 counted, %d logged and one line saying the others were not",
			errs.n, h.n, lostWarnBurst+1)
	}
}
