package caller

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Process is a caller as the audit log records it (the "caller" block).
type Process struct {
	PID int32  `json:"pid"`
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// LoginUID and SessionID are the kernel's audit identity of the login
	// session the process descends from (pam_loginuid sets them at login;
	// sudo and su keep them). Absent when unset (4294967295), as for
	// daemons started by systemd, or unreadable.
	LoginUID  *uint32 `json:"loginUID,omitempty"`
	SessionID *uint32 `json:"sessionID,omitempty"`
	// Exe is the executable the kernel says the process runs.
	Exe string `json:"exe,omitempty"`
	// Cmdline is the process's argv, at most maxCmdline bytes of it.
	Cmdline []string `json:"cmdline,omitempty"`
	// Kubelet says the caller is the kubelet (see IsKubelet).
	Kubelet bool `json:"kubelet"`
	// Exited says the process was gone (or its pid taken by another)
	// before /proc could be read: only PID, UID and GID, from the
	// socket, are known, with whatever was read before it went.
	Exited bool `json:"exited,omitempty"`
}

// IsKubelet says whether p is the kubelet; false for nil (no caller known).
func (p *Process) IsKubelet() bool { return p != nil && p.Kubelet }

// Label is the caller label of metrics: "kubelet" or "other".
func (p *Process) Label() string {
	if p.IsKubelet() {
		return "kubelet"
	}
	return "other"
}

// Bounds on what is read from /proc for one connection: a command line can
// be as long as the kernel's argument limit (megabytes).
const (
	maxCmdline = 4096
	maxSmall   = 64 // loginuid, sessionid
	maxStat    = 1024
	maxStatus  = 4096 // status is ~1.5 KB; Uid and Gid come in its first lines
)

// unsetID is the kernel's "not set" for loginuid and sessionid ((u32)-1).
const unsetID = 1<<32 - 1

// Cred is what the socket says of its peer (SO_PEERCRED), at connect time.
type Cred struct {
	PID      int32
	UID, GID uint32
}

// Read completes cred from procRoot (normally "/proc") where no pidfd of
// the peer is to be had (a kernel without SO_PEERPIDFD): what it reads may
// be another process's that took the pid after the peer exited, and is
// dropped when that shows. acceptedTicks is the boot-relative time the
// connection was accepted, in clock ticks (as /proc/<pid>/stat counts a
// process's start): a process that started later has only taken the
// peer's pid, and is not read. Nor is one whose effective uid or gid
// (/proc/<pid>/status) differ from the socket's: that the peer changed
// them after connecting is rarer than a pid reused. Either way the peer is
// recorded as exited. A process that took the pid between the connection
// and its accept, with the peer's uid and gid, goes unseen: hence the
// pidfd where there is one (ReadWhile).
func Read(procRoot string, cred Cred, acceptedTicks uint64) *Process {
	dir := filepath.Join(procRoot, strconv.Itoa(int(cred.PID)))
	var start uint64
	return read(procRoot, cred, func(before bool) bool {
		if before {
			var err error
			start, err = startTicks(dir)
			return err == nil && start <= acceptedTicks && sameIDs(dir, cred)
		}
		// The pid may have changed hands while it was read.
		again, err := startTicks(dir)
		return err == nil && again == start && sameIDs(dir, cred)
	})
}

// ReadWhile completes cred from procRoot and keeps what it read only if
// running, asked before and after the reads, says the peer still runs: a
// process keeps its pid until it exits and is reaped, so /proc/<pid> was
// then the peer's. running is a pidfd's answer (FromConn).
func ReadWhile(procRoot string, cred Cred, running func() bool) *Process {
	return read(procRoot, cred, func(bool) bool { return running() })
}

// read reads /proc/<pid> of cred's process between two calls of valid
// (before, then after the reads), and keeps it only when both say yes.
func read(procRoot string, cred Cred, valid func(before bool) bool) *Process {
	p := &Process{PID: cred.PID, UID: cred.UID, GID: cred.GID}
	gone := func() *Process {
		*p = Process{PID: cred.PID, UID: cred.UID, GID: cred.GID, Exited: true}
		return p
	}
	if cred.PID <= 0 {
		// 0: the peer is in a PID namespace crishim cannot see.
		return gone()
	}
	dir := filepath.Join(procRoot, strconv.Itoa(int(cred.PID)))
	if !valid(true) {
		return gone()
	}
	p.LoginUID = readID(filepath.Join(dir, "loginuid"))
	p.SessionID = readID(filepath.Join(dir, "sessionid"))
	if exe, err := os.Readlink(filepath.Join(dir, "exe")); err == nil {
		p.Exe = strings.TrimSuffix(exe, " (deleted)")
	}
	if b, err := readBounded(filepath.Join(dir, "cmdline"), maxCmdline); err == nil {
		p.Cmdline = splitCmdline(b)
	}
	// The mount namespace is asked only of a would-be kubelet, and before
	// the second validity check, so that what it says is the peer's.
	kubelet := IsKubeletExe(p.UID, p.Exe) && hostMountNS(procRoot, dir)
	if !valid(false) {
		return gone()
	}
	p.Kubelet = kubelet
	return p
}

// hostMountNS says whether the process at dir sees the host's mounts: its
// mount namespace is PID 1's, or crishim's own. A process in a container
// is in another, where its exe is a path of the container's file system,
// which whoever made the image names as they like.
func hostMountNS(procRoot, dir string) bool {
	ns, err := os.Stat(filepath.Join(dir, "ns", "mnt"))
	if err != nil {
		return false
	}
	for _, host := range []string{"1", "self"} {
		// PID 1's: crishim's own may be private (the unit's PrivateTmp).
		if h, err := os.Stat(filepath.Join(procRoot, host, "ns", "mnt")); err == nil && os.SameFile(ns, h) {
			return true
		}
	}
	return false
}

// sameIDs says whether the process at dir has the effective uid and gid
// the socket recorded (the second of the Uid: and Gid: lines of status).
func sameIDs(dir string, cred Cred) bool {
	b, err := readBounded(filepath.Join(dir, "status"), maxStatus)
	if err != nil {
		return false
	}
	var uidOK, gidOK bool
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "Uid" && k != "Gid") {
			continue
		}
		f := strings.Fields(v)
		if len(f) < 2 {
			return false
		}
		id, err := strconv.ParseUint(f[1], 10, 32)
		if err != nil {
			return false
		}
		if k == "Uid" {
			uidOK = uint32(id) == cred.UID
		} else {
			gidOK = uint32(id) == cred.GID
		}
	}
	return uidOK && gidOK
}

// IsKubeletExe is crishim's rule for "the caller is the kubelet", given a
// process in the host's mount namespace: a process of root whose
// executable, as the kernel names it (/proc/<pid>/exe, which the process
// cannot change; argv[0] and comm it can), is a file named kubelet. Only
// root can make such a process (or do anything else the kubelet can), so an
// operator or a member of the socket's group cannot pass for the kubelet;
// root can, and root can evade any audit on its own node. Root in a
// container cannot: its exe is a path in the container's file system.
func IsKubeletExe(uid uint32, exe string) bool {
	return uid == 0 && exe != "" && filepath.Base(exe) == "kubelet"
}

// readID reads a loginuid or sessionid file; nil when unset or unreadable.
func readID(path string) *uint32 {
	b, err := readBounded(path, maxSmall)
	if err != nil {
		return nil
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil || v == unsetID {
		return nil
	}
	id := uint32(v)
	return &id
}

// startTicks is field 22 of /proc/<pid>/stat: when the process started, in
// clock ticks after boot. The command name (field 2) may hold spaces and
// parentheses, so the fields are counted after its last ')'.
func startTicks(dir string) (uint64, error) {
	b, err := readBounded(filepath.Join(dir, "stat"), maxStat)
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("stat: no command name")
	}
	// After ')': state is field 3, so starttime (22) is the 20th.
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, errors.New("stat: too few fields")
	}
	return strconv.ParseUint(f[19], 10, 64)
}

func readBounded(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, n))
}

// splitCmdline splits /proc/<pid>/cmdline at its NULs. A command line cut
// at the bound ends in a part of an argument, kept as it is.
func splitCmdline(b []byte) []string {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil // a kernel thread, or a zombie
	}
	return strings.Split(string(b), "\x00")
}

type ctxKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p *Process) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext is the caller of the call ctx belongs to: set by NewContext,
// or by crishim's gRPC server as its peer's AuthInfo. Nil when unknown (a
// call crishim makes itself, a connection that is not a unix socket).
func FromContext(ctx context.Context) *Process {
	if p, ok := ctx.Value(ctxKey{}).(*Process); ok {
		return p
	}
	if pr, ok := peer.FromContext(ctx); ok {
		if ai, ok := pr.AuthInfo.(AuthInfo); ok {
			return ai.Process
		}
	}
	return nil
}

// AuthInfo is the gRPC peer information of a connection to crishim's
// socket: grpc-go puts it in every call's peer (peer.FromContext).
type AuthInfo struct {
	credentials.CommonAuthInfo
	Process *Process
}

// AuthType names this kind of AuthInfo.
func (AuthInfo) AuthType() string { return "crishim-peer" }
