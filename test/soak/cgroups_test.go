//go:build soak

package soak

import (
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// cgroupMount is where the host mounts its cgroup file systems.
const cgroupMount = "/sys/fs/cgroup"

// hierarchies lists the mount point of every cgroup hierarchy on the host:
// each v1 controller's (and named hierarchy's) directory under
// /sys/fs/cgroup and the cgroup2 mount (/sys/fs/cgroup/unified on a hybrid
// host, /sys/fs/cgroup itself on a pure v2 one). Symlinks such as cpu ->
// cpu,cpuacct are resolved, and each hierarchy is listed once.
func hierarchies() []string {
	if _, err := os.Stat(filepath.Join(cgroupMount, "cgroup.controllers")); err == nil {
		return []string{cgroupMount}
	}
	seen := map[string]bool{}
	var out []string
	entries, _ := os.ReadDir(cgroupMount)
	for _, e := range entries {
		p, err := filepath.EvalSymlinks(filepath.Join(cgroupMount, e.Name()))
		if err != nil || seen[p] {
			continue
		}
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err != nil {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// cgroupTree maps every cgroup directory at or below root, in every
// hierarchy, to its inode number. kernfs gives a directory made anew a new
// inode number, so an entry with the same path and inode as before is the
// same directory, never removed.
func cgroupTree(root string) map[string]uint64 {
	out := map[string]uint64{}
	for _, h := range hierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			var st syscall.Stat_t
			if syscall.Stat(p, &st) == nil {
				out[p] = st.Ino
			}
			return nil
		})
	}
	return out
}
