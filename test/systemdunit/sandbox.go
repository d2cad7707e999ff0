package systemdunit

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Sandbox is what a unit's file-system sandboxing settings (systemd.exec(5), systemd 252)
// make of the file system its service sees:
//
//   - ProtectSystem=strict: everything read-only but the API file systems /dev, /proc and
//     /sys; yes: /usr, /boot and /efi read-only; full: /etc too.
//   - ReadWritePaths=: those paths stay writable ("-" prefix: may be missing).
//   - RuntimeDirectory=, StateDirectory=, CacheDirectory=, LogsDirectory= (with their
//     *DirectoryMode=, 0755 by default): created below /run, /var/lib, /var/cache and
//     /var/log, the innermost with the mode, and writable whatever ProtectSystem= says; their
//     paths in $RUNTIME_DIRECTORY, $STATE_DIRECTORY, $CACHE_DIRECTORY, $LOGS_DIRECTORY.
//   - PrivateTmp=yes: empty /tmp and /var/tmp of its own.
//   - ProtectHome=yes: /home, /root and /run/user empty and inaccessible; read-only: read-only;
//     tmpfs: empty and read-only.
//
// Settings that change the file system otherwise (BindPaths=, ReadOnlyPaths=, ...) are
// refused by Mounts. The kernel-interface ones (ProtectKernelTunables= and its kin, which
// make parts of /proc and /sys read-only) and the system-call filters are not emulated:
// they restrict kernel interfaces, not the files a service reads and writes.
type Sandbox struct {
	ProtectSystem  string // "", "yes", "full" or "strict"
	ProtectHome    string // "", "yes", "read-only" or "tmpfs"
	PrivateTmp     bool
	ReadWritePaths []string    // absolute; a leading "-" kept: may be missing
	Directories    []Directory // RuntimeDirectory= and its kin, in the order named

	modes         map[string]os.FileMode // *DirectoryMode=, by setting
	unimplemented []string               // where settings Mounts does not implement are
}

// Directory is one directory a RuntimeDirectory=, StateDirectory=, CacheDirectory= or
// LogsDirectory= setting makes for the service.
type Directory struct {
	Setting string      // "LogsDirectory"
	Path    string      // "/var/log/crishim"
	Mode    os.FileMode // of the innermost directory
}

// directoryBase is where each setting's directories go for a system unit, and the
// variable that names them.
var directoryBase = map[string]struct{ dir, env string }{
	"RuntimeDirectory": {"/run", "RUNTIME_DIRECTORY"},
	"StateDirectory":   {"/var/lib", "STATE_DIRECTORY"},
	"CacheDirectory":   {"/var/cache", "CACHE_DIRECTORY"},
	"LogsDirectory":    {"/var/log", "LOGS_DIRECTORY"},
}

func (sb *Sandbox) apply(key, value string) error {
	switch key {
	case "ProtectSystem":
		v, err := boolOr(value, "full", "strict")
		sb.ProtectSystem = v
		return err
	case "ProtectHome":
		v, err := boolOr(value, "read-only", "tmpfs")
		sb.ProtectHome = v
		return err
	case "PrivateTmp":
		v, err := boolOr(value)
		sb.PrivateTmp = v == "yes"
		return err
	case "ReadWritePaths":
		if value == "" {
			sb.ReadWritePaths = nil
			return nil
		}
		for _, p := range strings.Fields(value) {
			if !filepath.IsAbs(strings.TrimPrefix(p, "-")) {
				return fmt.Errorf("%q is not an absolute path", p)
			}
			sb.ReadWritePaths = append(sb.ReadWritePaths, p)
		}
		return nil
	case "RuntimeDirectoryMode", "StateDirectoryMode", "CacheDirectoryMode", "LogsDirectoryMode":
		m, err := strconv.ParseUint(value, 8, 32)
		if err != nil || m > 0o7777 {
			return fmt.Errorf("%q is not an octal mode", value)
		}
		if sb.modes == nil {
			sb.modes = map[string]os.FileMode{}
		}
		sb.modes[strings.TrimSuffix(key, "Mode")] = os.FileMode(m)
		return nil
	}
	// RuntimeDirectory= and its kin.
	if value == "" {
		sb.Directories = slices.DeleteFunc(sb.Directories, func(d Directory) bool { return d.Setting == key })
		return nil
	}
	for _, name := range strings.Fields(value) {
		if strings.Contains(name, ":") {
			return fmt.Errorf("%q: symlinks (NAME:LINK) are not implemented", name)
		}
		if filepath.IsAbs(name) || slices.Contains(strings.Split(name, "/"), "..") {
			return fmt.Errorf("%q: want a relative path with no .. element", name)
		}
		sb.Directories = append(sb.Directories, Directory{Setting: key, Path: filepath.Join(directoryBase[key].dir, name)})
	}
	return nil
}

// boolOr reads a systemd boolean as "yes" or "" (no), or one of the words also allowed.
func boolOr(value string, words ...string) (string, error) {
	switch strings.ToLower(value) {
	case "1", "yes", "y", "true", "t", "on":
		return "yes", nil
	case "0", "no", "n", "false", "f", "off", "":
		return "", nil
	}
	if slices.Contains(words, value) {
		return value, nil
	}
	return "", fmt.Errorf("%q is not a boolean or one of %q", value, words)
}

// resolved fills in the directories' modes (a *DirectoryMode= line may come after its
// directory's) and refuses what Mounts does not implement.
func (sb Sandbox) resolved() (Sandbox, error) {
	if len(sb.unimplemented) > 0 {
		return Sandbox{}, fmt.Errorf("sandboxing settings not implemented: %s", strings.Join(sb.unimplemented, ", "))
	}
	dirs := make([]Directory, len(sb.Directories))
	for i, d := range sb.Directories {
		d.Mode = 0o755
		if m, ok := sb.modes[d.Setting]; ok {
			d.Mode = m
		}
		dirs[i] = d
	}
	sb.Directories = dirs
	return sb, nil
}

// Env is what systemd adds to the service's environment for its directories:
// RUNTIME_DIRECTORY=/run/crishim and its kin, several joined with ":".
func (sb Sandbox) Env() []string {
	var out []string
	for _, setting := range []string{"RuntimeDirectory", "StateDirectory", "CacheDirectory", "LogsDirectory"} {
		var paths []string
		for _, d := range sb.Directories {
			if d.Setting == setting {
				paths = append(paths, d.Path)
			}
		}
		if len(paths) > 0 {
			out = append(out, directoryBase[setting].env+"="+strings.Join(paths, ":"))
		}
	}
	return out
}

// Mount is one step of building the service's file system, in order.
type Mount struct {
	Op     MountOp
	Target string      // the path as the service sees it
	Source string      // Bind, BindHidden: the host path
	Mode   os.FileMode // Tmpfs: of its root
}

// MountOp is what a Mount does.
type MountOp int

const (
	// Bind puts the host's Source (a file or a directory tree) at Target, read-only.
	Bind MountOp = iota
	// BindWritable is Bind, writable.
	BindWritable
	// Tmpfs mounts an empty file system with root Mode at Target, writable.
	Tmpfs
	// TmpfsReadOnly is Tmpfs, read-only.
	TmpfsReadOnly
	// ReadOnly makes the tree at Target read-only.
	ReadOnly
	// Writable makes the tree at Target writable again (after a ReadOnly above it).
	Writable
)

// Placement says where the test bed keeps what the service would find on a node.
type Placement struct {
	// State is the host directory standing for the machine's root where systemd makes the
	// service's directories: /var/log/crishim is State/var/log/crishim. The machine's own
	// are never touched.
	State string
	// Files are put, read-only, where the service would find them on a node: path as the
	// service sees it -> host path (the binary at ExecStart's path, its config file).
	Files map[string]string
	// Keep are host directories the sandbox would hide (PrivateTmp=) that stay visible at
	// their paths, read-only: the test bed's runtime socket lives under /var/tmp, a node's
	// under /run.
	Keep []string
}

// Mounts is the plan for the service's file system: what systemd does for the unit's
// settings, with the unit's directories made under p.State and p's files and kept
// directories put in place. Apply it in a mount namespace of the service's own.
func (sb Sandbox) Mounts(p Placement) ([]Mount, error) {
	sb, err := sb.resolved()
	if err != nil {
		return nil, err
	}
	var ms []Mount
	// Each directory made by systemd is writable, whatever ProtectSystem= says.
	for _, d := range sb.Directories {
		ms = append(ms, Mount{Op: BindWritable, Target: d.Path, Source: filepath.Join(p.State, d.Path)})
	}
	for _, rw := range sb.ReadWritePaths {
		path, optional := strings.CutPrefix(rw, "-")
		if _, err := os.Stat(path); err != nil {
			if optional && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("ReadWritePaths=%s: %w", rw, err)
		}
		ms = append(ms, Mount{Op: BindWritable, Target: path, Source: path})
	}
	for _, target := range slices.Sorted(maps.Keys(p.Files)) {
		ms = append(ms, Mount{Op: Bind, Target: target, Source: p.Files[target]})
	}
	if sb.PrivateTmp {
		ms = append(ms, Mount{Op: Tmpfs, Target: "/tmp", Mode: 0o1777}, Mount{Op: Tmpfs, Target: "/var/tmp", Mode: 0o1777})
		for _, k := range p.Keep {
			ms = append(ms, Mount{Op: Bind, Target: k, Source: k})
		}
	}
	home := []string{"/home", "/root", "/run/user"}
	for _, h := range home {
		if _, err := os.Stat(h); err != nil {
			continue
		}
		switch sb.ProtectHome {
		case "yes":
			ms = append(ms, Mount{Op: TmpfsReadOnly, Target: h, Mode: 0})
		case "tmpfs":
			ms = append(ms, Mount{Op: TmpfsReadOnly, Target: h, Mode: 0o755})
		case "read-only":
			ms = append(ms, Mount{Op: ReadOnly, Target: h})
		}
	}
	var readOnly []string
	switch sb.ProtectSystem {
	case "strict":
		readOnly = []string{"/"}
	case "full":
		readOnly = []string{"/usr", "/boot", "/efi", "/etc"}
	case "yes":
		readOnly = []string{"/usr", "/boot", "/efi"}
	}
	for _, r := range readOnly {
		if _, err := os.Stat(r); err == nil {
			ms = append(ms, Mount{Op: ReadOnly, Target: r})
		}
	}
	if sb.ProtectSystem == "strict" {
		// The API file systems keep their own protections (ProtectKernelTunables= and kin).
		for _, api := range []string{"/dev", "/proc", "/sys"} {
			ms = append(ms, Mount{Op: Writable, Target: api})
		}
	}
	if len(readOnly) > 0 {
		// What was writable under a read-only tree is writable again.
		for _, m := range ms {
			if m.Op == BindWritable || m.Op == Tmpfs {
				ms = append(ms, Mount{Op: Writable, Target: m.Target})
			}
		}
	}
	return ms, nil
}
