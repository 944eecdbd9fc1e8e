package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// newSubsystem returns containerd's v1 controller for name, rooted at the
// v1 mount root.
func newSubsystem(name cgroup1.Name) cgroup1.Subsystem {
	switch name {
	case cgroup1.Cpu:
		return cgroup1.NewCpu(mountRoot)
	case cgroup1.Cpuacct:
		return cgroup1.NewCpuacct(mountRoot)
	case cgroup1.Cpuset:
		return cgroup1.NewCpuset(mountRoot)
	case cgroup1.Memory:
		// OptionalSwap: no failure when swap accounting (memsw) is off.
		return cgroup1.NewMemory(mountRoot, cgroup1.OptionalSwap())
	case cgroup1.Pids:
		return cgroup1.NewPids(mountRoot)
	case cgroup1.Blkio:
		return cgroup1.NewBlkio(mountRoot)
	case cgroup1.Freezer:
		return cgroup1.NewFreezer(mountRoot)
	}
	panic("cgroup: no v1 subsystem " + string(name))
}

// v1Dir is the absolute directory of rel in the v1 controller name ("" when
// that controller is not in use).
func (h *Hierarchy) v1Dir(name cgroup1.Name, rel string) string {
	base, ok := h.v1Roots[name]
	if !ok {
		return ""
	}
	return filepath.Join(mountRoot, string(name), base, rel)
}

// newV1 makes rel in every v1 controller in use and applies res.
func (h *Hierarchy) newV1(rel string, res *specs.LinuxResources) (cgroup1.Cgroup, error) {
	// Create with no resources first, then apply through Update: containerd's
	// memory Update orders memory.limit_in_bytes and memory.memsw.limit_in_bytes
	// so that memsw >= limit holds at every step, which Create does not.
	if err := h.makeCpuset(rel); err != nil {
		return nil, err
	}
	cg, err := cgroup1.New(h.v1Path(rel), &specs.LinuxResources{}, cgroup1.WithHierarchy(h.v1HierarchyNoCpuset), allowAnyController)
	if err != nil {
		return nil, err
	}
	if err := h.updateV1(cg, rel, res); err != nil {
		return nil, err
	}
	return cg, nil
}

// updateV1 applies res to an existing v1 group.
func (h *Hierarchy) updateV1(cg cgroup1.Cgroup, rel string, res *specs.LinuxResources) error {
	r := h.v1Resources(rel, res)
	if m := r.Memory; m != nil && m.Limit != nil && m.Swap != nil {
		if err := h.setMemoryAndSwap(rel, *m.Limit, *m.Swap); err != nil {
			return err
		}
		mm := *m
		mm.Limit, mm.Swap = nil, nil
		r.Memory = &mm
	}
	// pids.max is written here, not by containerd: a launcher thread of
	// the agent may be inside the group at this moment, and the file then
	// holds the limit plus one per such thread (see ForkInside). <= 0
	// means unlimited in the runtime spec.
	r.Pids = nil
	if err := cg.Update(r); err != nil {
		return err
	}
	if c := res.CPU; c != nil {
		if err := h.setCpuset(rel, c.Cpus, c.Mems); err != nil {
			return err
		}
	}
	if res.Pids != nil && res.Pids.Limit != nil {
		if err := h.setPidsMax(rel, *res.Pids.Limit); err != nil {
			return err
		}
	}
	return nil
}

// v1HierarchyNoCpuset is the subsystems berth uses without cpuset, which
// containerd's cgroup1 handles by walking up every ancestor, reading and
// copying cpuset.cpus and cpuset.mems, on every New and again on every
// Update (its cpuset Update is its Create): most of the cost of making a
// job's cgroup, measured. makeCpuset and setCpuset do the cpuset part.
func (h *Hierarchy) v1HierarchyNoCpuset() ([]cgroup1.Subsystem, error) {
	out := make([]cgroup1.Subsystem, 0, len(h.subsystems))
	for _, s := range h.subsystems {
		if s.Name() != cgroup1.Cpuset {
			out = append(out, s)
		}
	}
	return out, nil
}

// makeCpuset makes rel in the v1 cpuset hierarchy, parents first when
// missing, and gives every directory it makes, or finds empty, the
// cpuset.cpus and cpuset.mems of its parent: a v1 cpuset child starts
// empty and refuses tasks (Documentation/admin-guide/cgroup-v1/cpusets.rst).
// A host without the cpuset controller in use needs nothing.
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
			if cur, rerr := readSmall(filepath.Join(dir, f)); rerr == nil && len(bytes.TrimSpace(cur)) > 0 {
				continue
			}
		} else if cur, rerr := readSmall(filepath.Join(dir, f)); rerr != nil || len(bytes.TrimSpace(cur)) > 0 {
			continue
		}
		v, rerr := readSmall(filepath.Join(parent, f))
		if rerr != nil {
			return fmt.Errorf("read %s: %w", filepath.Join(parent, f), rerr)
		}
		if werr := writeFD(filepath.Join(dir, f), string(bytes.TrimSpace(v))); werr != nil {
			return fmt.Errorf("write %s: %w", filepath.Join(dir, f), werr)
		}
	}
	return nil
}

// setCpuset writes the CPUs and memory nodes a group may use (runtime-spec
// LinuxCPU Cpus and Mems); an empty value leaves the file as it is.
func (h *Hierarchy) setCpuset(rel, cpus, mems string) error {
	dir := h.v1Dir(cgroup1.Cpuset, rel)
	if dir == "" {
		return nil
	}
	for _, w := range []struct{ file, v string }{{"cpuset.cpus", cpus}, {"cpuset.mems", mems}} {
		if w.v == "" {
			continue
		}
		if err := writeFD(filepath.Join(dir, w.file), w.v); err != nil {
			return fmt.Errorf("write %s to %s: %w", w.v, filepath.Join(dir, w.file), err)
		}
	}
	return nil
}

// setMemoryAndSwap writes memory.limit_in_bytes and
// memory.memsw.limit_in_bytes in the order that keeps memsw >= limit true at
// every step, as the kernel requires (EINVAL otherwise;
// Documentation/admin-guide/cgroup-v1/memory.rst, 2.5): memsw first when the
// new memsw is at least the current limit, else the limit first. (containerd's
// cgroup1 Update means to do this but swaps the wrong pair of settings.)
// -1 means unlimited.
func (h *Hierarchy) setMemoryAndSwap(rel string, limit, swap int64) error {
	dir := h.v1Dir(cgroup1.Memory, rel)
	if dir == "" {
		return nil
	}
	limitFile := filepath.Join(dir, "memory.limit_in_bytes")
	swapFile := filepath.Join(dir, "memory.memsw.limit_in_bytes")
	data, err := os.ReadFile(limitFile)
	if err != nil {
		return fmt.Errorf("read %s: %w", limitFile, err)
	}
	cur, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return fmt.Errorf("parse %s: %w", limitFile, err)
	}
	unl := func(v int64) int64 {
		if v < 0 {
			return math.MaxInt64
		}
		return v
	}
	writes := []struct {
		file string
		v    int64
	}{{limitFile, limit}, {swapFile, swap}}
	if unl(swap) >= cur {
		writes[0], writes[1] = writes[1], writes[0]
	}
	for _, w := range writes {
		if err := os.WriteFile(w.file, []byte(strconv.FormatInt(w.v, 10)), 0); err != nil {
			return fmt.Errorf("write %d to %s: %w", w.v, w.file, err)
		}
	}
	return nil
}

// v1Resources is res as the v1 controllers can take it: Unified dropped
// (logged), memsw dropped where swap accounting is off (logged), the
// deprecated kernel memory limit dropped (the kernel no longer accepts it,
// Documentation/admin-guide/cgroup-v1/memory.rst), devices dropped (berth
// does not use the devices controller).
func (h *Hierarchy) v1Resources(rel string, res *specs.LinuxResources) *specs.LinuxResources {
	r := *res
	r.Unified = nil
	r.Devices = nil
	for _, note := range Unenforced(h.mode, res) {
		h.log.Warn("cgroup limit not enforced", "cgroup", rel, "mode", h.mode.String(), "note", note)
	}
	if res.Memory != nil {
		m := *res.Memory
		//lint:ignore SA1019 cleared precisely because the kernel no longer accepts it
		m.Kernel = nil
		if m.Swap != nil && !h.memswAvailable() {
			h.log.Warn("cgroup swap limit not applied: swap accounting is off (no memory.memsw.limit_in_bytes)", "cgroup", rel)
			m.Swap = nil
		}
		r.Memory = &m
	}
	return &r
}

// memswAvailable reports whether v1 swap accounting is on.
func (h *Hierarchy) memswAvailable() bool {
	dir := h.v1Dir(cgroup1.Memory, "")
	if dir == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes"))
	return err == nil
}

// Unenforced lists, one note per item, the parts of res that a host in mode
// m does not enforce: on v1 (Legacy, Hybrid) every res.Unified key
// (memory.high has no v1 equivalent; an exact cpu.weight is carried by
// res.CPU.Shares instead), since Unified is a cgroup v2 map
// (runtime-spec config-linux.md "Unified").
func Unenforced(m Mode, res *specs.LinuxResources) []string {
	if res == nil || m == Unified {
		return nil
	}
	var keys []string
	for k := range res.Unified {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var notes []string
	for _, k := range keys {
		switch k {
		case "memory.high":
			notes = append(notes, fmt.Sprintf("memory.high=%s is not enforced on cgroup v1 (no equivalent); only the hard limit memory.limit_in_bytes applies", res.Unified[k]))
		case "cpu.weight":
			notes = append(notes, fmt.Sprintf("cpu.weight=%s is a cgroup v2 file; on cgroup v1 cpu.shares from the CPU shares setting applies", res.Unified[k]))
		default:
			notes = append(notes, fmt.Sprintf("%s=%s is a cgroup v2 file and is not applied on cgroup v1", k, res.Unified[k]))
		}
	}
	return notes
}

// isGone reports whether err says the cgroup file or directory is gone.
func isGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist)
}
