package cgroup

// The cpuset controller: the CPUs and memory nodes a group may use
// (runtime-spec LinuxCPU Cpus and Mems). On v2 containerd writes
// cpuset.cpus and cpuset.mems; on v1 berth makes and writes the cpuset
// cgroups itself, because containerd's cgroup1 copies the parent's
// cpuset.cpus and cpuset.mems up every ancestor on every New and Update,
// most of the cost of making a job's cgroup, measured
// (Documentation/admin-guide/cgroup-v1/cpusets.rst: a v1 cpuset child
// starts empty and refuses tasks).

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"path/filepath"

	"github.com/berthd/berth/internal/kernfile"
	"github.com/containerd/cgroups/v3/cgroup1"
	"golang.org/x/sys/unix"
)

// makeCpuset makes rel in the v1 cpuset hierarchy, parents first when
// missing, and gives every directory it makes, or finds empty, the
// cpuset.cpus and cpuset.mems of its parent. A host without the cpuset
// controller in use needs nothing.
func (h *Hierarchy) makeCpuset(rel string) error {
	dir := h.v1Dir(cgroup1.Cpuset, rel)
	if dir == "" {
		return nil
	}
	err := unix.Mkdir(dir, 0o755)
	if errors.Is(err, unix.ENOENT) && rel != "" && rel != "." {
		if err := h.makeCpuset(path.Dir(rel)); err != nil {
			return err
		}
		err = unix.Mkdir(dir, 0o755)
	}
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	parent := filepath.Dir(dir)
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		if err == nil { // made just now: empty unless the parent has clone_children
			if cur, rerr := kernfile.Read(filepath.Join(dir, f)); rerr == nil && len(bytes.TrimSpace(cur)) > 0 {
				continue
			}
		} else if cur, rerr := kernfile.Read(filepath.Join(dir, f)); rerr != nil || len(bytes.TrimSpace(cur)) > 0 {
			continue
		}
		v, rerr := kernfile.Read(filepath.Join(parent, f))
		if rerr != nil {
			return fmt.Errorf("read %s: %w", filepath.Join(parent, f), rerr)
		}
		if werr := kernfile.Write(filepath.Join(dir, f), string(bytes.TrimSpace(v))); werr != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(dir, f), werr)
		}
	}
	return nil
}

// setCpuset writes the CPUs and memory nodes a v1 group may use; an empty
// value leaves the file as it is, and so, with skipSame (NewExisting),
// does one the file already holds as written (the kernel prints a list in
// its own form, "0-3" for "0,1,2,3": such a value is written again).
func (h *Hierarchy) setCpuset(rel, cpus, mems string, skipSame bool) error {
	dir := h.v1Dir(cgroup1.Cpuset, rel)
	if dir == "" {
		return nil
	}
	for _, w := range []struct{ file, v string }{{"cpuset.cpus", cpus}, {"cpuset.mems", mems}} {
		if w.v == "" {
			continue
		}
		if skipSame {
			if cur, err := kernfile.Read(filepath.Join(dir, w.file)); err == nil && string(bytes.TrimSpace(cur)) == w.v {
				continue
			}
		}
		if err := kernfile.Write(filepath.Join(dir, w.file), w.v); err != nil {
			return fmt.Errorf("write %s to %s: %w", w.v, filepath.Join(dir, w.file), err)
		}
	}
	return nil
}
