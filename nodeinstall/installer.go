package nodeinstall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// Host paths the installer writes, as the manual installation of docs/install.md lays them
// out (the unit in packaging/systemd starts /usr/local/bin/crishim).
const (
	CrishimBin        = "/usr/local/bin/crishim"
	CrishimctlBin     = "/usr/local/bin/crishimctl"
	CrishimService    = "/etc/systemd/system/crishim.service"
	CrishimSocket     = "/etc/systemd/system/crishim.socket"
	KubeletUnitDropIn = "/etc/systemd/system/kubelet.service.d/90-crishim.conf"
	KubeletConfDropIn = "/etc/kubernetes/kubelet.conf.d/90-crishim.conf"
)

// Units.
const (
	crishimUnit = "crishim.service"
	socketUnit  = "crishim.socket"
	kubeletUnit = "kubelet.service"
	ownMarker   = "# Installed by crishim-node-installer"
)

// OwnUnitMarker heads the unit files the installer writes: a crishim.service without it is
// someone else's (the package's, an operator's) and is never overwritten or removed.
const OwnUnitMarker = ownMarker + " (packaging/kubernetes/install); its uninstall removes this file.\n"

// Node-level signs of the installer's work.
const (
	// TaintKey is on the node (NoSchedule) while the kubelet is being switched.
	TaintKey = "crishim.io/installing"
	// LabelKey=LabelInstalled is on the node once the kubelet talks to crishim and the node
	// is Ready again; it goes before an uninstall starts.
	LabelKey       = "crishim.io/crishim"
	LabelInstalled = "installed"
)

// Systemd is what the installer asks of the host's systemd (dbus.go: over D-Bus).
type Systemd interface {
	Reload(ctx context.Context) error
	Enable(ctx context.Context, units ...string) error
	Disable(ctx context.Context, units ...string) error
	Start(ctx context.Context, unit string) error
	Restart(ctx context.Context, unit string) error
	Stop(ctx context.Context, unit string) error
	// FragmentPath is the file the unit was loaded from, "" if there is none.
	FragmentPath(ctx context.Context, unit string) (string, error)
}

// Cluster is what the installer asks of the API server about its own node (cluster.go).
type Cluster interface {
	SetTaint(ctx context.Context, on bool) error
	SetLabel(ctx context.Context, on bool) error
	// WaitReady waits until the node's Ready condition is True with a heartbeat at or after
	// since: a kubelet restarted at since has reported it.
	WaitReady(ctx context.Context, since time.Time) error
	// Labelled reports whether the node has LabelKey=LabelInstalled.
	Labelled(ctx context.Context) (bool, error)
}

// Installer does the work on one node.
type Installer struct {
	// Root is where the host's paths are mounted ("/host": /host/etc/systemd/system...).
	Root string
	// Payload is the image's directory of what to install: bin/crishim, bin/crishimctl,
	// systemd/crishim.service, systemd/crishim.socket, kubelet/kubelet.service.d/90-crishim.conf,
	// kubelet/kubelet.conf.d/90-crishim.conf.
	Payload string
	Systemd Systemd
	Cluster Cluster
	// CheckCRI asks crishim for CRI Status on its socket; nil when it answers ready.
	CheckCRI func(ctx context.Context) error
	// CheckTimeout bounds each wait: crishim answering, the node Ready again.
	CheckTimeout time.Duration
	Log          *slog.Logger
	// Now is time.Now; tests replace it.
	Now func() time.Time
}

// change is one file the installer wrote or removed, with what was there before.
type change struct {
	path    string // host path
	existed bool
	old     []byte
	mode    fs.FileMode
}

// journal lists the changes of one run, oldest first, for the rollback.
type journal []change

func (j journal) touches(paths ...string) bool {
	for _, c := range j {
		for _, p := range paths {
			if c.path == p {
				return true
			}
		}
	}
	return false
}

func (in *Installer) host(p string) string { return filepath.Join(in.Root, p) }

func (in *Installer) now() time.Time {
	if in.Now != nil {
		return in.Now()
	}
	return time.Now()
}

// writeFile puts b at host path p (mode), atomically, if it differs from what is there,
// and journals the previous content.
func (in *Installer) writeFile(j *journal, p string, b []byte, mode fs.FileMode) error {
	hp := in.host(p)
	old, err := os.ReadFile(hp)
	existed := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read %s: %w", p, err)
	}
	var oldMode fs.FileMode
	if existed {
		st, err := os.Stat(hp)
		if err != nil {
			return err
		}
		oldMode = st.Mode().Perm()
		if bytes.Equal(old, b) && oldMode == mode {
			return nil
		}
	}
	if err := atomicWrite(hp, b, mode); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	*j = append(*j, change{path: p, existed: existed, old: old, mode: oldMode})
	return nil
}

// removeFile removes host path p if it exists, journaling its content.
func (in *Installer) removeFile(j *journal, p string) error {
	hp := in.host(p)
	old, err := os.ReadFile(hp)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", p, err)
	}
	st, err := os.Stat(hp)
	if err != nil {
		return err
	}
	if err := os.Remove(hp); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	*j = append(*j, change{path: p, existed: true, old: old, mode: st.Mode().Perm()})
	return nil
}

// undo puts every journaled file back as it was, newest change first.
func (in *Installer) undo(j journal) error {
	var errs []error
	for i := len(j) - 1; i >= 0; i-- {
		c := j[i]
		if c.existed {
			errs = append(errs, atomicWrite(in.host(c.path), c.old, c.mode))
		} else if err := os.Remove(in.host(c.path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func atomicWrite(path string, b []byte, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename: nothing
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// payloadFile is one file of the payload and where it goes on the host.
type payloadFile struct {
	src, dst string
	mode     fs.FileMode
	unit     bool // a unit file: headed by OwnUnitMarker
}

var crishimFiles = []payloadFile{
	{"bin/crishim", CrishimBin, 0o755, false},
	{"bin/crishimctl", CrishimctlBin, 0o755, false},
	{"systemd/crishim.service", CrishimService, 0o644, true},
	{"systemd/crishim.socket", CrishimSocket, 0o644, true},
}

var kubeletFiles = []payloadFile{
	{"kubelet/kubelet.service.d/90-crishim.conf", KubeletUnitDropIn, 0o644, false},
	{"kubelet/kubelet.conf.d/90-crishim.conf", KubeletConfDropIn, 0o644, false},
}

func (in *Installer) payload(f payloadFile) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(in.Payload, f.src))
	if err != nil {
		return nil, fmt.Errorf("the image's payload: %w", err)
	}
	if f.unit {
		b = append([]byte(OwnUnitMarker), b...)
	}
	return b, nil
}

// Ownership is who put crishim.service on the node.
type Ownership int

const (
	// Absent: no crishim.service; the installer installs its own.
	Absent Ownership = iota
	// Ours: the installer's (its unit file carries OwnUnitMarker).
	Ours
	// Foreign: the .deb's (/lib/systemd/system/crishim.service) or an operator's: used as it
	// is, never overwritten or removed.
	Foreign
)

func (o Ownership) String() string {
	return [...]string{"absent", "installer", "foreign"}[o]
}

// ownership looks at the crishim.service systemd has loaded and at the installer's path.
func (in *Installer) ownership(ctx context.Context) (Ownership, string, error) {
	frag, err := in.Systemd.FragmentPath(ctx, crishimUnit)
	if err != nil {
		return Absent, "", err
	}
	own, err := os.ReadFile(in.host(CrishimService))
	switch {
	case err == nil && bytes.HasPrefix(own, []byte(ownMarker)):
		return Ours, CrishimService, nil
	case err == nil:
		return Foreign, CrishimService, nil
	case !errors.Is(err, fs.ErrNotExist):
		return Absent, "", fmt.Errorf("read %s: %w", CrishimService, err)
	case frag != "":
		return Foreign, frag, nil
	}
	return Absent, "", nil
}

// kubeletPointed reports whether both kubelet drop-ins are there as the payload has them.
func (in *Installer) kubeletPointed() (bool, error) {
	for _, f := range kubeletFiles {
		want, err := in.payload(f)
		if err != nil {
			return false, err
		}
		got, err := os.ReadFile(in.host(f.dst))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if !bytes.Equal(got, want) {
			return false, nil
		}
	}
	return true, nil
}

// waitCRI polls CheckCRI until it answers or CheckTimeout passes.
func (in *Installer) waitCRI(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, in.CheckTimeout)
	defer cancel()
	var last error
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		if last = in.CheckCRI(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("crishim does not answer CRI Status: %w", last)
		case <-t.C:
		}
	}
}

func (in *Installer) waitReady(ctx context.Context, since time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, in.CheckTimeout)
	defer cancel()
	return in.Cluster.WaitReady(ctx, since)
}

// restartKubelet restarts the kubelet and waits until the node is Ready again, reported by
// the new kubelet.
func (in *Installer) restartKubelet(ctx context.Context) error {
	since := in.now().Truncate(time.Second)
	if err := in.Systemd.Restart(ctx, kubeletUnit); err != nil {
		return err
	}
	return in.waitReady(ctx, since)
}

// rollbackError joins the error of a step with that of its rollback.
func rollbackError(step, rb error) error {
	if rb == nil {
		return fmt.Errorf("%w (rolled back)", step)
	}
	return fmt.Errorf("%w; the rollback failed too: %w", step, rb)
}

// logger is the installer's log, never nil.
func (in *Installer) logger() *slog.Logger {
	if in.Log != nil {
		return in.Log
	}
	return slog.Default()
}
