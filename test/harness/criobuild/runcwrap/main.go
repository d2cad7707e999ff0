// Command runcwrap runs runc on an OCI spec made possible for the test machine, for CRI-O
// in the test harness:
//
//	runcwrap REAL-RUNC RUNC-ARGS...
//
// Test machines (containers themselves) lack CAP_SYS_RESOURCE and other capabilities in their
// bounding set. CRI-O asks for oom_score_adj -998 on infra containers, which only
// CAP_SYS_RESOURCE may set, and grants privileged containers and their execs every capability
// it knows; runc then fails ("failed to update /proc/self/oom_score_adj: Permission denied",
// "unable to apply caps"). containerd has restrict_oom_score_adj for the first and caps
// privileged containers to the bounding set itself; CRI-O has neither, so this wrapper, set as
// the runtime's runtime_path, does both before runc reads the spec: it raises oomScoreAdj to
// its own and drops capabilities outside its bounding set. A machine without a hugetlb cgroup
// (a container) also gets the kubelet's hugepage limits dropped. Everything else passes
// unchanged.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: runcwrap REAL-RUNC [RUNC-ARGS...]")
		os.Exit(2)
	}
	runc, args := os.Args[1], os.Args[2:]
	if err := adjust(args); err != nil {
		fmt.Fprintln(os.Stderr, "runcwrap:", err)
		os.Exit(1)
	}
	err := syscall.Exec(runc, append([]string{runc}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "runcwrap: exec %s: %v\n", runc, err)
	os.Exit(1)
}

// adjust rewrites the spec a create/run reads (the bundle's config.json) or the process an
// exec reads (--process FILE); other commands read no spec.
func adjust(args []string) error {
	cmd, rest := subcommand(args)
	switch cmd {
	case "create", "run":
		bundle := flagValue(rest, "bundle", "b")
		if bundle == "" {
			bundle = "."
		}
		return rewrite(filepath.Join(bundle, "config.json"), func(spec map[string]any) error {
			dropHugepageLimits(spec)
			if p, ok := spec["process"].(map[string]any); ok {
				return fixProcess(p)
			}
			return nil
		})
	case "exec":
		if file := flagValue(rest, "process", "p"); file != "" {
			return rewrite(file, fixProcess)
		}
	}
	return nil
}

// runcGlobalWithValue are runc's global flags that take a separate value.
var runcGlobalWithValue = []string{"--root", "--log", "--log-format", "--criu", "--rootless"}

// subcommand finds runc's command after its global flags.
func subcommand(args []string) (string, []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return a, args[i+1:]
		}
		if slices.Contains(runcGlobalWithValue, a) {
			i++
		}
	}
	return "", nil
}

// flagValue returns the value of --long/-short, given as "--long V", "--long=V" or "-short V".
func flagValue(args []string, long, short string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, "--"+long+"="); ok {
			return v
		}
		if (a == "--"+long || a == "-"+long || a == "-"+short) && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// rewrite applies fix to a JSON file, keeping every field it does not touch.
func rewrite(path string, fix func(map[string]any) error) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read spec: %w", err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	if err := fix(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return fmt.Errorf("write spec: %w", err)
	}
	return nil
}

// fixProcess clamps an OCI process's oomScoreAdj and capabilities to what this process may
// grant.
// dropHugepageLimits removes the spec's hugetlb limits when the machine has no hugetlb
// cgroup to set them in: the kubelet asks for them on every container, and runc then fails
// ("cannot set hugetlb limit"). containerd leaves them out itself when hugetlb is missing;
// CRI-O passes them on.
func dropHugepageLimits(spec map[string]any) {
	if _, err := os.Stat("/sys/fs/cgroup/hugetlb"); err == nil {
		return
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return // cgroup v2: runc checks the controllers itself
	}
	linux, _ := spec["linux"].(map[string]any)
	if res, _ := linux["resources"].(map[string]any); res != nil {
		delete(res, "hugepageLimits")
	}
}

func fixProcess(p map[string]any) error {
	if adj, ok := p["oomScoreAdj"].(float64); ok {
		own, err := ownOOMScoreAdj()
		if err != nil {
			return err
		}
		if int(adj) < own {
			p["oomScoreAdj"] = own
		}
	}
	caps, ok := p["capabilities"].(map[string]any)
	if !ok {
		return nil
	}
	bounding, err := boundingSet()
	if err != nil {
		return err
	}
	for set, list := range caps {
		names, ok := list.([]any)
		if !ok {
			continue
		}
		kept := []any{}
		for _, n := range names {
			if s, ok := n.(string); ok && bounding[s] {
				kept = append(kept, n)
			}
		}
		caps[set] = kept
	}
	return nil
}

func ownOOMScoreAdj() (int, error) {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0, fmt.Errorf("read own oom_score_adj: %w", err)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// capNames are the capabilities by number, as in linux/capability.h.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// boundingSet reads this process's capability bounding set (CapBnd in /proc/self/status).
func boundingSet() (map[string]bool, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil, fmt.Errorf("read bounding set: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CapBnd:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("parse CapBnd: %w", err)
		}
		set := map[string]bool{}
		for i, name := range capNames {
			if mask&(1<<i) != 0 {
				set[name] = true
			}
		}
		return set, nil
	}
	return nil, errors.New("no CapBnd in /proc/self/status")
}
