package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"golang.org/x/sys/unix"
)

// BaseDir holds every slot directory and lock file. It is fixed rather than configurable
// because slots also own machine-global names (bridge, subnet, CNI network): two base
// directories would hand out the same names twice.
const BaseDir = "/var/tmp/crishim-testbed"

// MaxSlots is how many harness instances can run at once on one machine. It bounds the bridge
// names and subnets a slot claims.
const MaxSlots = 16

// slotMetaFile marks a directory as a harness slot and records the machine-global names the
// slot claimed, so that Teardown can clean a slot without trusting its directory name.
const slotMetaFile = "slot.json"

// slotMeta is the content of slotMetaFile.
type slotMeta struct {
	Slot     int    `json:"slot"`
	Socket   string `json:"socket"`
	Bridge   string `json:"bridge"`
	Subnet   string `json:"subnet"`
	Network  string `json:"network"`
	Detached bool   `json:"detached"`
	Owner    string `json:"owner,omitempty"`
	// Runtime is what runs in the slot, so that a teardown from the directory alone uses
	// the right backend; empty in slots of harnesses that predate it (Debian's containerd).
	Runtime Runtime `json:"runtime,omitempty"`
}

var slotDirName = regexp.MustCompile(`^slot-([0-9]+)$`)

// layout names every path of a slot. All of them derive from the slot directory so that a
// teardown started from only the directory finds everything.
type layout struct {
	dir string
}

func (l layout) meta() string       { return filepath.Join(l.dir, slotMetaFile) }
func (l layout) config() string     { return filepath.Join(l.dir, "config.toml") }
func (l layout) socket() string     { return filepath.Join(l.dir, "containerd.sock") }
func (l layout) ttrpc() string      { return filepath.Join(l.dir, "containerd.sock.ttrpc") }
func (l layout) pidFile() string    { return filepath.Join(l.dir, "containerd.pid") }
func (l layout) logFile() string    { return filepath.Join(l.dir, "containerd.log") }
func (l layout) root() string       { return filepath.Join(l.dir, "root") }
func (l layout) state() string      { return filepath.Join(l.dir, "state") }
func (l layout) temp() string       { return filepath.Join(l.dir, "tmp") }
func (l layout) opt() string        { return filepath.Join(l.dir, "opt") }
func (l layout) runcRoot() string   { return filepath.Join(l.dir, "runc") }
func (l layout) cniConfDir() string { return filepath.Join(l.dir, "cni", "net.d") }
func (l layout) ipamDir() string    { return filepath.Join(l.dir, "cni", "ipam") }
func (l layout) imagesTar() string  { return filepath.Join(l.dir, "images", "images.tar") }
func (l layout) pods() string       { return filepath.Join(l.dir, "pods") }

// shimSockets is where containerd 2.x's shims put their sockets (1.6 insists on
// shimSocketDir). containerd caps its length at 42 bytes: slotDir(MaxSlots-1) + "/s" is 34.
func (l layout) shimSockets() string { return filepath.Join(l.dir, "s") }

// taskDir is where the runc v2 shim keeps one bundle per task (config.json, address, rootfs).
func (l layout) taskDir() string {
	return filepath.Join(l.state(), "io.containerd.runtime.v2.task", criNamespace)
}

// slotDir, slotLock, slotBridge, slotSubnet and slotNetwork give slot n's names. The bridge
// name stays within IFNAMSIZ-1 (15) bytes for every n < MaxSlots.
func slotDir(n int) string     { return filepath.Join(BaseDir, "slot-"+strconv.Itoa(n)) }
func slotLock(n int) string    { return filepath.Join(BaseDir, "slot-"+strconv.Itoa(n)+".lock") }
func slotBridge(n int) string  { return "crishimbr" + strconv.Itoa(n) }
func slotSubnet(n int) string  { return fmt.Sprintf("10.244.%d.0/24", 200+n) }
func slotNetwork(n int) string { return "crishim-slot" + strconv.Itoa(n) }

func newSlotMeta(n int) slotMeta {
	return slotMeta{
		Slot:    n,
		Socket:  layout{slotDir(n)}.socket(),
		Bridge:  slotBridge(n),
		Subnet:  slotSubnet(n),
		Network: slotNetwork(n),
	}
}

// errSlotBusy reports that another process owns the slot.
var errSlotBusy = errors.New("slot is owned by another process")

// lockSlot takes slot n's lock without blocking. The returned file is the lock: the slot stays
// owned for as long as this file description (or a dup of it, e.g. one inherited by a
// detached containerd) stays open. The file is opened close-on-exec so that, unless passed on
// deliberately, it does not leak into child processes and keep the slot owned after we die.
func lockSlot(n int) (*os.File, error) {
	if err := os.MkdirAll(BaseDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", BaseDir, err)
	}
	// The lock file is never removed: removing it while another process opens it would let
	// two processes lock two different inodes of "the same" file.
	f, err := os.OpenFile(slotLock(n), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open slot lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errSlotBusy
		}
		return nil, fmt.Errorf("flock %s: %w", slotLock(n), err)
	}
	return f, nil
}

// acquireSlot takes the lowest free slot.
func acquireSlot() (int, *os.File, error) {
	for n := 0; n < MaxSlots; n++ {
		f, err := lockSlot(n)
		if errors.Is(err, errSlotBusy) {
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		return n, f, nil
	}
	return 0, nil, fmt.Errorf("all %d harness slots under %s are in use (leftover detached demos can be removed with Teardown / make demo-clean)", MaxSlots, BaseDir)
}

// readSlotMeta finds out which machine-global names belong to dir. It refuses directories
// that are neither marked as a slot nor named like one, because teardown kills processes and
// deletes files based on the answer.
func readSlotMeta(dir string) (slotMeta, error) {
	b, err := os.ReadFile(layout{dir}.meta())
	if err == nil {
		var m slotMeta
		if err := json.Unmarshal(b, &m); err != nil {
			return slotMeta{}, fmt.Errorf("parse %s: %w", layout{dir}.meta(), err)
		}
		return m, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return slotMeta{}, fmt.Errorf("read slot metadata: %w", err)
	}
	// An interrupted run may have died before writing the metadata; the name is then the
	// only evidence, and we trust it only inside BaseDir.
	if filepath.Dir(dir) == BaseDir {
		if m := slotDirName.FindStringSubmatch(filepath.Base(dir)); m != nil {
			n, _ := strconv.Atoi(m[1])
			if n < MaxSlots {
				return newSlotMeta(n), nil
			}
		}
	}
	return slotMeta{}, fmt.Errorf("%s is not a harness slot directory (no %s and not %s/slot-N)", dir, slotMetaFile, BaseDir)
}

func writeSlotMeta(dir string, m slotMeta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode slot metadata: %w", err)
	}
	if err := os.WriteFile(layout{dir}.meta(), b, 0o644); err != nil {
		return fmt.Errorf("write slot metadata: %w", err)
	}
	return nil
}
