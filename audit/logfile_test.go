package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lines reads every line of the files at paths as an event's container
// ID, failing on a line that is not one whole event (a NUL byte, a
// fragment).
func lines(t *testing.T, paths ...string) []string {
	t.Helper()
	ids, _ := linesCut(t, false, paths...)
	return ids
}

// linesCut is lines, but with cutOK a last line without its newline is
// counted in cut instead: the end of a copy made while a line was written.
func linesCut(t *testing.T, cutOK bool, paths ...string) (ids []string, cut int) {
	t.Helper()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.IndexByte(b, 0); i >= 0 {
			t.Fatalf("%s: a NUL byte at offset %d of %d", p, i, len(b))
		}
		for l := range strings.Lines(string(b)) {
			if cutOK && !strings.HasSuffix(l, "\n") {
				cut++
				continue
			}
			var ev Event
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("%s: line %q: %v", p, l, err)
			}
			ids = append(ids, ev.ContainerID)
		}
	}
	return ids, cut
}

// TestRotateBySize: past its size the file is renamed to lumberjack's
// backup name, a new one (0600) takes the next events, the oldest backups
// beyond --audit-log-maxbackup and those older than --audit-log-maxage
// are removed, and no event is lost or cut.
func TestRotateBySize(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	stale := filepath.Join(dir, "audit-2020-01-01T00-00-00.000.log") // rotated long ago
	foreign := filepath.Join(dir, "audit-notes.log")                 // not a backup
	for _, p := range []string{stale, foreign} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l, err := Open(Config{Path: path, MaxBackups: 3, MaxAgeDays: 30}, &countErrors{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	now := time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC)
	l.file.now = func() time.Time { now = now.Add(time.Second); return now }
	l.file.maxBytes = 1000 // a few events
	var want []string
	for i := range 40 {
		id := fmt.Sprintf("c%02d", i)
		want = append(want, id)
		l.Start(Event{Kind: KindSignal, ContainerID: id})
	}
	backups, err := filepath.Glob(filepath.Join(dir, "audit-2026-*.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(backups) != 3 {
		t.Fatalf("backups %v, want the newest 3", backups)
	}
	for _, p := range []string{stale} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s, older than --audit-log-maxage, is still there", p)
		}
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("a file not rotated by crishim was removed: %v", err)
	}
	got := lines(t, append(backups, path)...) // Glob sorts: oldest first
	if len(got) >= len(want) || !slices.Equal(got, want[len(want)-len(got):]) {
		t.Errorf("events %v; want the last ones of %v, in order", got, want)
	}
	for _, p := range append(backups, path) {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() > 1000 {
			t.Errorf("%s: %v (%v); want mode 0600, at most 1000 bytes", p, fi, err)
		}
	}
}

// TestDeletedBetweenStatAndWrite: a file deleted after crishim checked the
// path and before it wrote takes no event with it: the event is written
// again, to a new file at the path.
func TestDeletedBetweenStatAndWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	errs := &countErrors{}
	l, err := Open(Config{Path: path}, errs, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Start(Event{Kind: KindSignal, ContainerID: "a"})
	l.file.beforeWrite = func() {
		l.file.beforeWrite = nil
		if err := os.Remove(path); err != nil {
			t.Error(err)
		}
	}
	l.Start(Event{Kind: KindSignal, ContainerID: "b"})
	if got := fmt.Sprint(lines(t, path)); got != "[b]" {
		t.Errorf("the path holds %s, want [b]", got)
	}
	if errs.n != 0 {
		t.Errorf("%d errors counted", errs.n)
	}
}

// TestRotationByOthersUnderLoad: writers log events while logrotate's
// three ways rotate the file, over and over: copytruncate (the file copied,
// then truncated in place), rename, delete. Every line of every file is one
// whole event (no NUL bytes where a write landed past a truncation, no
// fragment), but for the last line of a copy made while it was written;
// rename and delete lose nothing (an event written to a file deleted under
// it is written again); copytruncate loses what was written between a copy
// and its truncation, as it does to every program.
func TestRotationByOthersUnderLoad(t *testing.T) {
	const writers, perWriter = 4, 500
	for _, mode := range []string{"copytruncate", "rename", "delete"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "audit.log")
			errs := &countErrors{}
			l, err := Open(Config{Path: path, MaxSizeMB: 100}, errs, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			// A file crishim created itself (after a reopen): where
			// lumberjack wrote without O_APPEND.
			l.Start(Event{Kind: KindSignal, ContainerID: "first"})
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			var held []*os.File // deleted files, read through a descriptor
			defer func() {
				for _, f := range held {
					f.Close()
				}
			}()
			var written atomic.Int64
			var wg sync.WaitGroup
			for w := range writers {
				wg.Go(func() {
					for i := range perWriter {
						l.Start(Event{Kind: KindSignal, ContainerID: fmt.Sprintf("w%d-%d", w, i)})
						written.Add(1)
					}
				})
			}
			rounds := 0
			for written.Load() < writers*perWriter {
				if written.Load() < int64(rounds*writers*perWriter/50) {
					runtime.Gosched() // some events between rounds
					continue
				}
				rounds++
				aside := filepath.Join(dir, fmt.Sprintf("aside.%03d", rounds))
				switch mode {
				case "copytruncate":
					b, err := os.ReadFile(path)
					if os.IsNotExist(err) {
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(aside, b, 0o600); err != nil {
						t.Fatal(err)
					}
					if err := os.Truncate(path, 0); err != nil {
						t.Fatal(err)
					}
				case "rename":
					if err := os.Rename(path, aside); err != nil && !os.IsNotExist(err) {
						t.Fatal(err)
					}
				case "delete":
					f, err := os.Open(path)
					if os.IsNotExist(err) {
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					held = append(held, f)
					if err := os.Remove(path); err != nil {
						t.Fatal(err)
					}
				}
			}
			wg.Wait()
			if errs.n != 0 {
				t.Errorf("%d events not written", errs.n)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "aside.*"))
			if _, err := os.Stat(path); err == nil {
				files = append(files, path)
			}
			got, cut := linesCut(t, mode == "copytruncate", files...)
			for _, f := range held {
				b, err := os.ReadFile("/proc/self/fd/" + fmt.Sprint(f.Fd()))
				if err != nil {
					t.Fatal(err)
				}
				tmp := filepath.Join(t.TempDir(), "deleted")
				if err := os.WriteFile(tmp, b, 0o600); err != nil {
					t.Fatal(err)
				}
				got = append(got, lines(t, tmp)...)
			}
			seen := map[string]int{}
			for _, id := range got {
				seen[id]++
			}
			lost, twice := 0, 0
			for w := range writers {
				for i := range perWriter {
					switch seen[fmt.Sprintf("w%d-%d", w, i)] {
					case 0:
						lost++
					case 1:
					default:
						twice++
					}
				}
			}
			t.Logf("%s: %d rounds, %d of %d events lost (%d cut at the end of a copy), %d found twice", mode, rounds, lost, writers*perWriter, cut, twice)
			switch {
			case rounds == 0:
				t.Error("no rotation happened during the writes")
			case mode == "copytruncate" && lost > 0 && lost == writers*perWriter:
				t.Error("every event lost")
			case mode != "copytruncate" && lost > 0:
				t.Errorf("%d events lost", lost)
			case mode != "delete" && twice > 0:
				// A deleted file may hold an event written again
				// to its successor; nothing else may.
				t.Errorf("%d events written twice", twice)
			}
		})
	}
}
