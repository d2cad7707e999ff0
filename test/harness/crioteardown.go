package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// crioTasks reads the OCI spec of every container and infra container CRI-O created in the
// slot, which containers-storage keeps in the slot's run root, for their cgroups: after a
// crash nothing else records them. CRI-O puts a container in <parent>/crio-<id> and, with
// monitor_cgroup = "pod", its conmon in <parent>/crio-conmon-<id>.
func crioTasks(l layout) []task {
	specs, _ := filepath.Glob(filepath.Join(l.crioRun(), "overlay-containers", "*", "userdata", "config.json"))
	var tasks []task
	for _, path := range specs {
		id := filepath.Base(filepath.Dir(filepath.Dir(path)))
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var spec struct {
			Linux struct {
				CgroupsPath string `json:"cgroupsPath"`
			} `json:"linux"`
		}
		if json.Unmarshal(b, &spec) != nil || spec.Linux.CgroupsPath == "" {
			continue
		}
		cg := spec.Linux.CgroupsPath
		tasks = append(tasks,
			task{id: id, cgroupsPath: cg},
			task{id: id, cgroupsPath: filepath.Join(filepath.Dir(cg), "crio-conmon-"+id)})
	}
	return tasks
}

// crioHelpers are the programs of a CRI-O slot that name its paths in their flags. Named,
// because other processes may name the slot too and are not ours to kill: a crishim in
// front of it (--runtime-endpoint), a demo's or a node's daemons.
var crioHelpers = []string{"crio", "conmon", "runcwrap", "runc", "crun", "pinns", "ociload"}

// teardownCRIO kills what CRI-O leaves running in a slot once crio itself is dead: conmon,
// runc and pinns name the slot's paths in their flags, container processes sit in the
// containers' cgroups; and removes those cgroups. (Container processes are also found by the
// generic teardown from their root filesystem, which lies in the slot.) The generic
// teardown then unmounts and removes the rest.
func teardownCRIO(l layout) error {
	tasks := crioTasks(l)
	pids := ProcessesWhere(func(argv []string) bool {
		return slices.Contains(crioHelpers, filepath.Base(argv[0])) && ArgvMentions(l.dir)(argv)
	})
	for _, t := range tasks {
		pids = append(pids, cgroupProcs(t.cgroupsPath)...)
	}
	pids = slices.DeleteFunc(slices.Compact(slices.Sorted(slices.Values(pids))), func(pid int) bool { return pid == os.Getpid() })
	var errs []error
	if left := signalAndWait(pids, syscall.SIGKILL, 5*time.Second); len(left) > 0 {
		errs = append(errs, fmt.Errorf("CRI-O's processes %v survived SIGKILL", left))
	}
	for _, t := range tasks {
		if err := removeCgroup(t.cgroupsPath); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
