package proxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// watchSocket calls created each time a file named path is created (a
// runtime bound its socket there, or renamed one into place), until ctx
// ends. It watches path's directory with inotify, so it costs nothing
// while nothing happens there. It returns an error if the watch cannot
// start or its directory goes away; the reconnect backoffs recover without
// it, only later.
func watchSocket(ctx context.Context, path string, created func()) error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("watch %s: inotify: %w", path, err)
	}
	// Non-blocking: the file parks its reads on Go's poller, and closing
	// it ends a read in progress.
	f := os.NewFile(uintptr(fd), "inotify")
	defer f.Close()
	dir, name := filepath.Split(path)
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.Close() })
	defer stop()
	// Room for many events at once; each is a header and a name of at
	// most NAME_MAX bytes.
	buf := make([]byte, 16*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := f.Read(buf)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("watch %s: %w", dir, err)
		}
		seen, gone := socketEvents(buf[:n], name)
		if seen {
			created()
		}
		if gone {
			return fmt.Errorf("watch %s: %w", dir, errDirGone)
		}
	}
}

var errDirGone = errors.New("the directory is gone")

// socketEvents reads inotify events: whether one names name, and whether
// the watch ended (its directory was removed or unmounted).
func socketEvents(buf []byte, name string) (seen, gone bool) {
	for len(buf) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(buf) {
			break
		}
		evName := buf[unix.SizeofInotifyEvent:end]
		for len(evName) > 0 && evName[len(evName)-1] == 0 {
			evName = evName[:len(evName)-1]
		}
		if string(evName) == name {
			seen = true
		}
		if ev.Mask&unix.IN_IGNORED != 0 {
			gone = true
		}
		buf = buf[end:]
	}
	return seen, gone
}
