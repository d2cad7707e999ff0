package allowlist

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Policy is the node's debug image allowlist: the patterns of the flag and
// those of the file, the file re-read when it changes (Refresh) or on
// Reload (SIGHUP), the whole replaced when crishim's configuration is
// (Replace). A nil *Policy allows everything.
type Policy struct {
	cur atomic.Pointer[state]
	mu  sync.Mutex // serializes reloads and replacements
}

// state is a policy as last read; it is replaced whole, never changed.
type state struct {
	flag *List
	file string
	list *List // the flag's patterns and the file's
	seen fileStamp
}

// fileStamp is what says a file changed without reading it.
type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

// New builds the policy from --debug-image-allowlist's value and
// --debug-image-allowlist-file's path (either may be empty). A file that
// cannot be read or parsed is an error now; later, on reload, the last good
// list stays in force.
func New(flagValue, file string) (*Policy, error) {
	fl, err := ParseFlag(flagValue)
	if err != nil {
		return nil, err
	}
	p := &Policy{}
	p.cur.Store(&state{flag: fl, file: file, list: fl})
	if file != "" {
		if _, err := p.reload(true); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Enforced says whether images are checked at all: with no pattern in the
// flag and no file, every image is allowed, as before the allowlist existed.
// A file, once given, is enforced even when it lists nothing, so that a
// file emptied by mistake (or caught half written) refuses rather than opens.
func (p *Policy) Enforced() bool {
	if p == nil {
		return false
	}
	s := p.cur.Load()
	return s.file != "" || s.flag.Len() > 0
}

// Governs names the flags that decide, for refusal messages.
func (p *Policy) Governs() string {
	s := p.cur.Load()
	switch {
	case s.file != "" && s.flag.Len() > 0:
		return fmt.Sprintf("--debug-image-allowlist and --debug-image-allowlist-file %s", s.file)
	case s.file != "":
		return "--debug-image-allowlist-file " + s.file
	}
	return "--debug-image-allowlist"
}

// Match returns the pattern allowing one of names, if any (see List.Match).
func (p *Policy) Match(names ...string) (Pattern, bool) {
	return p.cur.Load().list.Match(names...)
}

// Len is the number of patterns in force.
func (p *Policy) Len() int { return p.cur.Load().list.Len() }

// File is the path of the patterns file, if any.
func (p *Policy) File() string { return p.cur.Load().file }

// Replace puts q's patterns and file in force: crishim's configuration
// changed them.
func (p *Policy) Replace(q *Policy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur.Store(q.cur.Load())
}

// Reload re-reads the file (SIGHUP). Without a file there is nothing to do.
func (p *Policy) Reload() error {
	if p == nil || p.File() == "" {
		return nil
	}
	_, err := p.reload(true)
	return err
}

// Refresh re-reads the file if it changed since it was last read, and
// reports whether it did. A bad file is an error and the list in force
// stays.
func (p *Policy) Refresh() (bool, error) {
	if p == nil || p.File() == "" {
		return false, nil
	}
	return p.reload(false)
}

// maxFileSize bounds the allowlist file: patterns, one a line, a few KB.
const maxFileSize = 1 << 20

// reload reads the file when forced or when its stamp changed, and reports
// whether it did.
func (p *Policy) reload(force bool) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.cur.Load()
	fi, err := os.Stat(old.file)
	if err != nil {
		return false, fmt.Errorf("--debug-image-allowlist-file: %w", err)
	}
	st := stampOf(fi)
	if !force && st == old.seen {
		return false, nil
	}
	// Never blocks (O_NONBLOCK: a FIFO would hold the reloader for ever)
	// and never reads unbounded.
	f, err := os.OpenFile(old.file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, fmt.Errorf("--debug-image-allowlist-file: %w", err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return false, fmt.Errorf("--debug-image-allowlist-file: %w", err)
	}
	switch {
	case !fi.Mode().IsRegular():
		return false, fmt.Errorf("--debug-image-allowlist-file: %s is not a regular file (mode %s)", old.file, fi.Mode())
	case fi.Size() > maxFileSize:
		return false, fmt.Errorf("--debug-image-allowlist-file: %s is larger than %d bytes (1 MiB), the most an allowlist file may have", old.file, maxFileSize)
	}
	fl, err := Parse(io.LimitReader(f, maxFileSize))
	if err != nil {
		return false, fmt.Errorf("--debug-image-allowlist-file %s: %w", old.file, err)
	}
	merged := &List{patterns: append(append([]Pattern{}, old.flag.patterns...), fl.patterns...)}
	p.cur.Store(&state{flag: old.flag, file: old.file, list: merged, seen: st})
	return true, nil
}
