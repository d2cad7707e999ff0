package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

const cgroupMount = "/sys/fs/cgroup"

// cgroupDirs lists the directories that hold cgroup name in every hierarchy: one per v1
// controller, or one in the v2 unified tree.
func cgroupDirs(name string) []string {
	if _, err := os.Stat(filepath.Join(cgroupMount, "cgroup.controllers")); err == nil {
		return []string{filepath.Join(cgroupMount, name)}
	}
	entries, err := os.ReadDir(cgroupMount)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range entries {
		// The kubelet wants its cgroups in every v1 hierarchy, the named systemd one too, but
		// not in the v2 tree a hybrid host mounts beside them.
		if !e.IsDir() || e.Name() == "unified" {
			continue
		}
		dirs = append(dirs, filepath.Join(cgroupMount, e.Name(), name))
	}
	return dirs
}

// createCgroupRoot creates the node's cgroupRoot, which the kubelet requires to exist.
func createCgroupRoot(name string) error {
	for _, d := range cgroupDirs(name) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", d, err)
		}
	}
	return nil
}

// removeCgroupTree removes the node's cgroupRoot and everything the kubelet made below it.
func removeCgroupTree(name string) error { return removeCgroupDirs(cgroupDirs(name)) }

// removeCgroupDirs removes each root and every cgroup below it, deepest first
// (cgroup directories are removed with rmdir, never with their files).
func removeCgroupDirs(roots []string) error {
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}
