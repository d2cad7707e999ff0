package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/crishim/crishim/regularfile"
)

// logFile is the audit log's file at its path, rotated by size as
// kube-apiserver rotates its audit log (lumberjack's scheme, whose backup
// names it keeps, so that files rotated by earlier versions are counted
// and removed alike), but always written in append mode: lumberjack
// creates a file without O_APPEND, so after logrotate's copytruncate the
// next write lands at the old offset and the file starts with a hole of
// NUL bytes. Its methods are called with Log.mu held.
type logFile struct {
	path       string
	maxBytes   int64 // rotate past this; 0: never
	maxBackups int   // rotated files kept; 0: all
	maxAge     time.Duration
	now        func() time.Time

	f      *os.File    // nil until the next write opens the path
	opened os.FileInfo // f's, as opened
	// beforeWrite, in tests, runs between the path's check and the write.
	beforeWrite func()
}

func newLogFile(cfg Config) *logFile {
	return &logFile{
		path:       cfg.Path,
		maxBytes:   rotateAt(cfg.MaxSizeMB),
		maxBackups: cfg.MaxBackups,
		maxAge:     time.Duration(cfg.MaxAgeDays) * 24 * time.Hour,
		now:        time.Now,
	}
}

func rotateAt(mb int) int64 { return int64(max(mb, 0)) * megabyte }

const megabyte = 1024 * 1024

// open opens the path for appending, creating it 0600 and its directory
// 0700 (the log names every shell opened on the node) if they are gone.
func (lf *logFile) open() error {
	if err := os.MkdirAll(filepath.Dir(lf.path), 0o700); err != nil {
		return err
	}
	f, err := openRegular(lf.path)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return err
	}
	lf.f, lf.opened = f, fi
	return nil
}

func (lf *logFile) close() {
	if lf.f != nil {
		_ = lf.f.Close()
		lf.f, lf.opened = nil, nil
	}
}

// backupTime is how a rotated file's name says when it was rotated (UTC):
// <name>-<time><ext>, as lumberjack names them.
const backupTime = "2006-01-02T15-04-05.000"

// rotate renames the file at the path to a backup name, and removes the
// rotated files beyond maxBackups and older than maxAge.
func (lf *logFile) rotate() error {
	lf.close()
	dir, base := filepath.Split(lf.path)
	ext := filepath.Ext(base)
	prefix := strings.TrimSuffix(base, ext) + "-"
	t := lf.now().UTC()
	backup := filepath.Join(dir, prefix+t.Format(backupTime)+ext)
	// Two rotations in one millisecond: the later one takes the next.
	for range 1000 {
		if _, err := os.Lstat(backup); errors.Is(err, fs.ErrNotExist) {
			break
		}
		t = t.Add(time.Millisecond)
		backup = filepath.Join(dir, prefix+t.Format(backupTime)+ext)
	}
	if err := os.Rename(lf.path, backup); err != nil {
		return err
	}
	lf.prune(dir, prefix, ext)
	return nil
}

// prune removes the rotated files beyond maxBackups (the oldest first) and
// those older than maxAge. What cannot be removed stays, to be tried again
// at the next rotation.
func (lf *logFile) prune(dir, prefix, ext string) {
	if lf.maxBackups <= 0 && lf.maxAge <= 0 {
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type backup struct {
		name string
		t    time.Time
	}
	var backups []backup
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ext) {
			continue
		}
		t, err := time.Parse(backupTime, strings.TrimSuffix(strings.TrimPrefix(name, prefix), ext))
		if err != nil {
			continue // not one of ours
		}
		backups = append(backups, backup{name, t})
	}
	slices.SortFunc(backups, func(a, b backup) int { return b.t.Compare(a.t) }) // newest first
	cutoff := lf.now().Add(-lf.maxAge)
	for i, b := range backups {
		if (lf.maxBackups > 0 && i >= lf.maxBackups) || (lf.maxAge > 0 && b.t.Before(cutoff)) {
			_ = os.Remove(filepath.Join(dir, b.name))
		}
	}
}

// unlinked says whether f's file has been deleted (no name left).
func unlinked(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}

// writeLine writes one line to the file the path names now, whole or not
// at all; broken says a failed write left a fragment that could not be
// cut back.
//
// Before each write it stats the path (one syscall): when the path no longer
// names the file being written (logrotate renamed or deleted it), the file
// is reopened, as nginx and kube-apiserver do on their operators' rotation;
// when it names something that is not a regular file, nothing is written and
// the event counts as failed. After the write, a file found deleted (between
// the stat and the write) gets the line again in a new file at the path. A
// write that fails part-way (a full disk) is cut back to where the line
// began, so no fragment stays for the next line to be glued to.
func (lf *logFile) writeLine(b []byte, reopened func()) (broken bool, err error) {
	for attempt := 0; ; attempt++ {
		fi, err := os.Stat(lf.path)
		switch {
		case err == nil && !fi.Mode().IsRegular():
			return false, fmt.Errorf("%s is no longer a regular file (%s); not writing to it", lf.path, regularfile.Kind(fi.Mode()))
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return false, err
		case lf.f != nil && (err != nil || !os.SameFile(fi, lf.opened)):
			reopened()
			lf.close()
		}
		if err == nil && lf.maxBytes > 0 && fi.Size() > 0 && fi.Size()+int64(len(b)) > lf.maxBytes {
			if err := lf.rotate(); err != nil {
				return false, fmt.Errorf("rotate: %w", err)
			}
		}
		if lf.f == nil {
			if err := lf.open(); err != nil {
				return false, err
			}
			fi = lf.opened
		}
		start := fi.Size() // where the line begins (O_APPEND: the end)
		if lf.beforeWrite != nil {
			lf.beforeWrite()
		}
		n, err := lf.f.Write(b)
		if err != nil {
			lf.close()
			return n > 0 && !cutBack(lf.path, start, int64(n)), err
		}
		if attempt > 0 || !unlinked(lf.f) {
			return false, nil
		}
		// Deleted while written: the line went with the file.
		reopened()
		lf.close()
	}
}
