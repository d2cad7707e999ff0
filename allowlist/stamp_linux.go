package allowlist

import (
	"os"
	"syscall"
)

// stampOf includes the inode: tools that replace a file by renaming a new
// one over it (ConfigMap volumes, editors) may keep its size and time.
func stampOf(fi os.FileInfo) fileStamp {
	st := fileStamp{mod: fi.ModTime(), size: fi.Size()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st
}
