package harness

import (
	"context"
	"os"
	"path/filepath"
	"strings"
)

// The two containerd backends differ in where their binaries come from and in their config;
// the daemon, its shims, ctr and the teardown are the same.

// containerd2Backend runs containerd v2.4 from the harness's own build.
func containerd2Backend() *backend {
	bins := cachedContainerd()
	return &backend{
		runtime: RuntimeContainerd,
		prepare: func(ctx context.Context) error {
			if err := ensurePackages(ctx, RuntimeContainerd); err != nil {
				return err
			}
			_, err := ensureContainerd(ctx)
			return err
		},
		writeConfig: func(l layout, m slotMeta, pauseImage string) error {
			return writeContainerdConfigs(l, m, containerd2Config(l, pauseImage))
		},
		// The build's directory goes first in PATH: containerd looks its shim up there, and
		// Debian's containerd package may have put its 1.6 shim in /usr/bin.
		command: func(l layout) ([]string, string) {
			return []string{bins.path("containerd"), "--config", l.config()}, bins.dir + ":" + callerPath()
		},
		importImages: func(ctx context.Context, l layout) error {
			return importImages(ctx, l, bins.path("ctr"))
		},
		importArchive: func(ctx context.Context, l layout, archive []byte, names ...string) error {
			return ctrImport(ctx, l, bins.path("ctr"), filepath.Join(filepath.Dir(l.imagesTar()), "import-"+archiveName(names)+".tar"), archive, names...)
		},
		tagImage: func(ctx context.Context, l layout, src, dst string) error {
			return ctrTag(ctx, l, bins.path("ctr"), src, dst)
		},
	}
}

// containerd16Backend runs Debian's containerd package.
func containerd16Backend() *backend {
	return &backend{
		runtime: RuntimeContainerd16,
		prepare: func(ctx context.Context) error { return ensurePackages(ctx, RuntimeContainerd16) },
		writeConfig: func(l layout, m slotMeta, pauseImage string) error {
			return writeContainerdConfigs(l, m, containerd16Config(l, pauseImage))
		},
		command: func(l layout) ([]string, string) {
			return []string{binary("containerd"), "--config", l.config()}, callerPath()
		},
		importImages: func(ctx context.Context, l layout) error {
			return importImages(ctx, l, binary("ctr"))
		},
		importArchive: func(ctx context.Context, l layout, archive []byte, names ...string) error {
			return ctrImport(ctx, l, binary("ctr"), filepath.Join(filepath.Dir(l.imagesTar()), "import-"+archiveName(names)+".tar"), archive, names...)
		},
		tagImage: func(ctx context.Context, l layout, src, dst string) error {
			return ctrTag(ctx, l, binary("ctr"), src, dst)
		},
	}
}

// callerPath is this process's PATH followed by the system directories, so that the daemon
// finds runc (and Debian's shim) even when the caller's PATH is a non-root one without the
// sbin directories.
func callerPath() string {
	want := strings.Join(systemBinDirs, ":")
	for _, e := range os.Environ() {
		if p, ok := strings.CutPrefix(e, "PATH="); ok && p != "" {
			return p + ":" + want
		}
	}
	return want
}
