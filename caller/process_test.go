package caller

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/peer"
)

// fakeProc writes /proc/<pid> files for Read: status from cred unless
// files has one (an empty value leaves a file out), and a mount namespace
// that is PID 1's, or a container's when container is set.
func fakeProc(t *testing.T, cred Cred, files map[string]string, exe string, container bool) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, strconv.Itoa(int(cred.PID)))
	for _, d := range []string{filepath.Join(dir, "ns"), filepath.Join(root, "1", "ns")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := files["status"]; !ok {
		files = maps.Clone(files)
		if files == nil {
			files = map[string]string{}
		}
		files["status"] = status(cred.UID, cred.GID)
	}
	for name, v := range files {
		if v == "" {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hostNS := filepath.Join(root, "1", "ns", "mnt")
	if err := os.WriteFile(hostNS, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if container {
		err := os.WriteFile(filepath.Join(dir, "ns", "mnt"), nil, 0o644)
		if err != nil {
			t.Fatal(err)
		}
	} else if err := os.Symlink(hostNS, filepath.Join(dir, "ns", "mnt")); err != nil {
		t.Fatal(err)
	}
	if exe != "" {
		if err := os.Symlink(exe, filepath.Join(dir, "exe")); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// status is the start of a /proc/<pid>/status whose real, effective, saved
// and file system ids are uid and gid.
func status(uid, gid uint32) string {
	u, g := strconv.Itoa(int(uid)), strconv.Itoa(int(gid))
	return "Name:\tx\nUmask:\t0022\nState:\tS (sleeping)\nPid:\t42\n" +
		"Uid:\t" + u + "\t" + u + "\t" + u + "\t" + u + "\n" +
		"Gid:\t" + g + "\t" + g + "\t" + g + "\t" + g + "\nGroups:\t\n"
}

// stat is a /proc/<pid>/stat line whose process started at tick start,
// with a command name that holds what trips naive parsers.
func stat(pid int, start uint64) string {
	f := make([]string, 20)
	for i := range f {
		f[i] = "0"
	}
	f[0] = "S"
	f[19] = strconv.FormatUint(start, 10)
	return strconv.Itoa(pid) + " (a) b (c)) " + strings.Join(f, " ") + " 0 0\n"
}

func u32(v uint32) *uint32 { return &v }

func TestRead(t *testing.T) {
	long := strings.Repeat("x", 2*maxCmdline)
	for _, tc := range []struct {
		name      string
		cred      Cred
		files     map[string]string
		exe       string
		accepted  uint64
		container bool // in a mount namespace of its own
		want      Process
	}{{
		name:     "an operator's crictl after sudo: the login uid and session survive",
		cred:     Cred{PID: 42, UID: 0, GID: 0},
		files:    map[string]string{"stat": stat(42, 100), "loginuid": "1000\n", "sessionid": "7", "cmdline": "crictl\x00rm\x00abc\x00"},
		exe:      "/usr/bin/crictl",
		accepted: 200,
		want:     Process{PID: 42, LoginUID: u32(1000), SessionID: u32(7), Exe: "/usr/bin/crictl", Cmdline: []string{"crictl", "rm", "abc"}},
	}, {
		name:     "the kubelet: root, its executable named kubelet, no login session",
		cred:     Cred{PID: 9, UID: 0, GID: 0},
		files:    map[string]string{"stat": stat(9, 5), "loginuid": "4294967295", "sessionid": "4294967295", "cmdline": "kubelet\x00--config=/k\x00"},
		exe:      "/usr/local/bin/kubelet",
		accepted: 200,
		want:     Process{PID: 9, Exe: "/usr/local/bin/kubelet", Cmdline: []string{"kubelet", "--config=/k"}, Kubelet: true},
	}, {
		name:      "root's binary named kubelet in a container is not the kubelet",
		cred:      Cred{PID: 9, UID: 0, GID: 0},
		files:     map[string]string{"stat": stat(9, 5), "cmdline": "kubelet\x00"},
		exe:       "/usr/local/bin/kubelet",
		accepted:  200,
		container: true,
		want:      Process{PID: 9, Exe: "/usr/local/bin/kubelet", Cmdline: []string{"kubelet"}},
	}, {
		name:     "a binary named kubelet run by someone else is not the kubelet",
		cred:     Cred{PID: 9, UID: 1000, GID: 1000},
		files:    map[string]string{"stat": stat(9, 5), "cmdline": "kubelet\x00"},
		exe:      "/home/u/kubelet",
		accepted: 200,
		want:     Process{PID: 9, UID: 1000, GID: 1000, Exe: "/home/u/kubelet", Cmdline: []string{"kubelet"}},
	}, {
		name:     "argv[0] kubelet is not the kubelet: only the executable counts",
		cred:     Cred{PID: 9},
		files:    map[string]string{"stat": stat(9, 5), "cmdline": "kubelet\x00"},
		exe:      "/usr/bin/python3",
		accepted: 200,
		want:     Process{PID: 9, Exe: "/usr/bin/python3", Cmdline: []string{"kubelet"}},
	}, {
		name:     "an executable replaced on disk keeps its name",
		cred:     Cred{PID: 9},
		files:    map[string]string{"stat": stat(9, 5)},
		exe:      "/usr/bin/kubelet (deleted)",
		accepted: 200,
		want:     Process{PID: 9, Exe: "/usr/bin/kubelet", Kubelet: true},
	}, {
		name:     "the caller exited before it was read",
		cred:     Cred{PID: 42, UID: 1000, GID: 100},
		accepted: 200,
		want:     Process{PID: 42, UID: 1000, GID: 100, Exited: true},
	}, {
		name:     "its pid taken by a process started after the connection",
		cred:     Cred{PID: 42, UID: 1000, GID: 100},
		files:    map[string]string{"stat": stat(42, 300), "loginuid": "0", "cmdline": "other\x00"},
		exe:      "/usr/bin/kubelet",
		accepted: 200,
		want:     Process{PID: 42, UID: 1000, GID: 100, Exited: true},
	}, {
		name:     "its pid taken by another user's process that started before the accept",
		cred:     Cred{PID: 42, UID: 4242, GID: 4242},
		files:    map[string]string{"stat": stat(42, 150), "status": status(0, 0), "loginuid": "1000", "cmdline": "sleep\x00"},
		exe:      "/usr/bin/sleep",
		accepted: 200,
		want:     Process{PID: 42, UID: 4242, GID: 4242, Exited: true},
	}, {
		name:     "its pid taken by a process of the same uid and another gid",
		cred:     Cred{PID: 42, UID: 1000, GID: 1000},
		files:    map[string]string{"stat": stat(42, 150), "status": status(1000, 5), "cmdline": "sleep\x00"},
		accepted: 200,
		want:     Process{PID: 42, UID: 1000, GID: 1000, Exited: true},
	}, {
		name:     "a status without ids is not the caller's",
		cred:     Cred{PID: 42, UID: 1000, GID: 1000},
		files:    map[string]string{"stat": stat(42, 150), "status": "Name:\tx\n", "cmdline": "sleep\x00"},
		accepted: 200,
		want:     Process{PID: 42, UID: 1000, GID: 1000, Exited: true},
	}, {
		name: "a peer in a PID namespace crishim cannot see (pid 0)",
		cred: Cred{PID: 0, UID: 5, GID: 5},
		want: Process{UID: 5, GID: 5, Exited: true},
	}, {
		name:     "a command line is read up to its bound",
		cred:     Cred{PID: 42},
		files:    map[string]string{"stat": stat(42, 1), "cmdline": "sh\x00" + long + "\x00"},
		accepted: 200,
		want:     Process{PID: 42, Cmdline: []string{"sh", long[:maxCmdline-3]}},
	}, {
		name:     "unparsable ids are left out",
		cred:     Cred{PID: 42},
		files:    map[string]string{"stat": stat(42, 1), "loginuid": "root", "sessionid": strings.Repeat("9", 100)},
		accepted: 200,
		want:     Process{PID: 42},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeProc(t, tc.cred, tc.files, tc.exe, tc.container)
			got := Read(root, tc.cred, tc.accepted)
			if !equal(got, &tc.want) {
				t.Errorf("Read = %s\nwant %s", show(got), show(&tc.want))
			}
		})
	}
}

// TestReadWhile: with a pidfd, what was read is kept only if the peer
// still ran after the reads; neither start time nor ids are asked.
func TestReadWhile(t *testing.T) {
	cred := Cred{PID: 42, UID: 1000, GID: 1000}
	root := fakeProc(t, cred, map[string]string{"status": "", "cmdline": "crictl\x00"}, "/usr/bin/crictl", false)
	for _, tc := range []struct {
		answers []bool // of running, in turn
		want    Process
	}{
		{[]bool{true, true}, Process{PID: 42, UID: 1000, GID: 1000, Exe: "/usr/bin/crictl", Cmdline: []string{"crictl"}}},
		{[]bool{true, false}, Process{PID: 42, UID: 1000, GID: 1000, Exited: true}}, // exited while read
		{[]bool{false}, Process{PID: 42, UID: 1000, GID: 1000, Exited: true}},
	} {
		asked := 0
		got := ReadWhile(root, cred, func() bool { asked++; return tc.answers[asked-1] })
		if !equal(got, &tc.want) || asked != len(tc.answers) {
			t.Errorf("running %v: %s after %d questions\nwant %s", tc.answers, show(got), asked, show(&tc.want))
		}
	}
}

func equal(a, b *Process) bool { return show(a) == show(b) }

func show(p *Process) string {
	s := func(v *uint32) string {
		if v == nil {
			return "nil"
		}
		return strconv.FormatUint(uint64(*v), 10)
	}
	return strings.Join([]string{strconv.Itoa(int(p.PID)), strconv.Itoa(int(p.UID)), strconv.Itoa(int(p.GID)),
		s(p.LoginUID), s(p.SessionID), p.Exe, strings.Join(p.Cmdline, "|"), strconv.FormatBool(p.Kubelet), strconv.FormatBool(p.Exited)}, " ")
}

// TestFromConnNamesThisProcess reads a real socket's peer: this test.
func TestFromConnNamesThisProcess(t *testing.T) {
	s := acceptedUnixConn(t)
	p, err := FromConn(s)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	if int(p.PID) != os.Getpid() || int(p.UID) != os.Getuid() || p.Exe != exe || p.Exited || p.Kubelet || len(p.Cmdline) == 0 || p.Cmdline[0] != os.Args[0] {
		t.Errorf("FromConn = %s; want this process (pid %d, exe %s)", show(p), os.Getpid(), exe)
	}
	if _, err := FromConn(&net.TCPConn{}); err == nil {
		t.Error("FromConn of a TCP connection: no error")
	}
}

func TestFromContext(t *testing.T) {
	p := &Process{PID: 1, Kubelet: true}
	if got := FromContext(NewContext(context.Background(), p)); got != p {
		t.Errorf("from NewContext: %v", got)
	}
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: AuthInfo{Process: p}})
	if got := FromContext(ctx); got != p {
		t.Errorf("from the gRPC peer: %v", got)
	}
	if got := FromContext(context.Background()); got != nil || got.IsKubelet() || got.Label() != "other" {
		t.Errorf("no caller: %v, kubelet %v, label %q", got, got.IsKubelet(), got.Label())
	}
}

// BenchmarkFromConn is what identifying a connection's caller costs, once
// per connection.
func BenchmarkFromConn(b *testing.B) {
	s := acceptedUnixConn(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromConn(s); err != nil {
			b.Fatal(err)
		}
	}
}

// acceptedUnixConn is the server side of a unix socket connection this
// process made to itself, closed with the test.
func acceptedUnixConn(tb testing.TB) net.Conn {
	tb.Helper()
	l, err := net.Listen("unix", filepath.Join(tb.TempDir(), "s"))
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	s, err := l.Accept()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}
