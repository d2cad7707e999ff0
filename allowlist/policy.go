package allowlist

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Policy is the node's debug image allowlist: the patterns of the flag and
// those of the file, the file re-read when it changes or on Reload (SIGHUP).
// A nil *Policy allows everything.
type Policy struct {
	flag *List
	file string

	cur atomic.Pointer[List] // the flag's patterns and the file's, as last read

	mu   sync.Mutex // serializes reloads
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
	p := &Policy{flag: fl, file: file}
	p.cur.Store(fl)
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
	return p != nil && (p.file != "" || p.flag.Len() > 0)
}

// Governs names the flags that decide, for refusal messages.
func (p *Policy) Governs() string {
	switch {
	case p.file != "" && p.flag.Len() > 0:
		return fmt.Sprintf("--debug-image-allowlist and --debug-image-allowlist-file %s", p.file)
	case p.file != "":
		return "--debug-image-allowlist-file " + p.file
	}
	return "--debug-image-allowlist"
}

// Match returns the pattern allowing one of names, if any (see List.Match).
func (p *Policy) Match(names ...string) (Pattern, bool) {
	return p.cur.Load().Match(names...)
}

// Reload re-reads the file (SIGHUP). Without a file there is nothing to do.
func (p *Policy) Reload() error {
	if p == nil || p.file == "" {
		return nil
	}
	_, err := p.reload(true)
	return err
}

// reload reads the file when forced or when its stamp changed, and reports
// whether it did.
func (p *Policy) reload(force bool) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fi, err := os.Stat(p.file)
	if err != nil {
		return false, fmt.Errorf("--debug-image-allowlist-file: %w", err)
	}
	st := stampOf(fi)
	if !force && st == p.seen {
		return false, nil
	}
	f, err := os.Open(p.file)
	if err != nil {
		return false, fmt.Errorf("--debug-image-allowlist-file: %w", err)
	}
	defer f.Close()
	fl, err := Parse(f)
	if err != nil {
		return false, fmt.Errorf("--debug-image-allowlist-file %s: %w", p.file, err)
	}
	merged := &List{patterns: append(append([]Pattern{}, p.flag.patterns...), fl.patterns...)}
	p.cur.Store(merged)
	p.seen = st
	return true, nil
}

// Watch re-reads the file when it changes (checked every interval) and
// when hup receives, until ctx is done. A bad file is logged and the list
// in force kept. Without a file, hup is still drained: SIGHUP means reload
// to an operator, never stop.
func (p *Policy) Watch(ctx context.Context, interval time.Duration, hup <-chan os.Signal, log *slog.Logger) {
	var tick <-chan time.Time
	if p != nil && p.file != "" {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		force := false
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-hup:
			force = true
		}
		if tick == nil {
			log.Info("SIGHUP: no --debug-image-allowlist-file to reload")
			continue
		}
		changed, err := p.reload(force)
		switch {
		case err != nil:
			log.Warn("debug image allowlist not reloaded; the previous list stays in force", "err", err)
		case changed:
			n := p.cur.Load().Len()
			log.Info("debug image allowlist loaded", "file", p.file, "patterns", n)
			if n == 0 {
				log.Warn("debug image allowlist is empty: every debug container is refused", "file", p.file)
			}
		}
	}
}
