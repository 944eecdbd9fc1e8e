package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ErrNotExist is returned (wrapped) by Load when the group exists in no
// hierarchy. It matches fs.ErrNotExist with errors.Is.
var ErrNotExist = fmt.Errorf("cgroup does not exist: %w", fs.ErrNotExist)

// Group is one cgroup (a job's or a sharing group's) in every hierarchy.
//
// Methods are safe for concurrent use.
type Group struct {
	h   *Hierarchy
	rel string
	// v1 is containerd's handle for the v1 controllers (nil on a unified
	// host, or when the group is gone from every v1 controller).
	v1 cgroup1.Cgroup
	// v2 is containerd's manager on a unified host (nil otherwise).
	v2 *cgroup2.Manager

	// runMu serialises ForkInside; runLeaf is the cgroup2 leaf of the
	// latest run ("" before the first), removed when the next run starts.
	runMu   sync.Mutex
	runLeaf string
	// leaf is runLeaf for readers that must not wait for a start in
	// progress (Processes at scrape time); nil before the first run.
	leaf atomic.Pointer[string]
	// limits is what New and Update wrote (Usage's Limits); nil for a
	// loaded group until Usage reads it from the kernel.
	limits atomic.Pointer[applied]
	// oom is the group's own v1 OOM kill count as Usage last read it, with
	// the host's count it is complete for (ownOOMKillsV1); nil: read it.
	oom atomic.Pointer[knownOOMKills]
	// dirs holds the directories Usage reads, found once (dirsOnce).
	dirsOnce sync.Once
	dirs     *groupDirs
	// existing is set while NewExisting writes the limits: a limit the
	// group's file already holds is not written again.
	existing bool
}

// Placement says where a new process must be put to run inside a Group.
type Placement struct {
	// UnifiedDir is the absolute directory of the group in the cgroup2
	// hierarchy ("" when there is none). Runs started with ForkInside live
	// in a leaf below it (RunPrefix).
	UnifiedDir string
	// ProcsFiles are the absolute paths of the group's cgroup.procs file in
	// each v1 hierarchy (empty on a pure v2 host). A process written into
	// all of them is inside the group.
	ProcsFiles []string
}

// New creates (or loads, when it exists) the cgroup at rel under the root,
// e.g. "jobs/orders-sink-0" or "groups/sinks/orders-sink-0" (JobRel), and applies res.
//
// Parent directories are created as needed, but a sharing group's own limits
// must be set by creating it first: New("groups/sinks", groupRes). A nil res,
// or a nil field of res, leaves that setting as it is (unlimited on a new
// group).
//
// v1 and hybrid: the group is made in every v1 controller in use through
// containerd's cgroup1 (cpuset.cpus/mems are copied from the parent, since
// v1 cpuset children start empty: Documentation/admin-guide/cgroup-v1/cpusets.rst);
// res.Memory.Swap is written to memory.memsw.limit_in_bytes only where that
// file exists (swap accounting on); res.Unified is not applied (memory.high
// has no v1 equivalent: a warning is logged, see Unenforced); res.Pids.Limit
// <= 0 writes "max". On a hybrid host the group is also made in the cgroup2
// hierarchy, without limits. Unified (v2): res is converted with
// cgroup2.ToResources, then every res.Unified key is written verbatim, so an
// exact "cpu.weight" or "memory.high" wins over the lossy shares→weight
// conversion; the controllers needed are enabled in every ancestor's
// cgroup.subtree_control.
//
// Errors: rel is invalid or empty; a directory cannot be made; the kernel
// refuses a value (e.g. EINVAL for a memsw limit below memory.limit_in_bytes,
// EBUSY for a memory limit below current usage). The group may be left
// partly made on error; Delete removes it.
func (h *Hierarchy) New(rel string, res *specs.LinuxResources) (*Group, error) {
	rel, err := cleanRel(rel)
	if err != nil || rel == "" {
		return nil, fmt.Errorf("create cgroup %q: %w", rel, errors.Join(ErrInvalidPath, err))
	}
	if res == nil {
		res = &specs.LinuxResources{}
	}
	g := &Group{h: h, rel: rel}
	if err := h.v.create(g, res); err != nil {
		return nil, err
	}
	g.setApplied(res)
	return g, nil
}

// NewExisting is New for a cgroup that may exist already with limits
// written, the one of a run an earlier agent started (live restart,
// docs/live-restart.md): every limit of res is in force when it returns,
// as with New, but one the group's file already holds is not written
// again. On cgroup v1 that is cpu.shares, cpu.cfs_quota_us (beside
// cpu.cfs_period_us, which New skips too: skipSamePeriod),
// memory.limit_in_bytes with memory.memsw.limit_in_bytes, pids.max and
// cpuset.cpus and cpuset.mems; on v2 cpu.max. A write of the CFS quota
// walks every task group of the host under a global mutex
// (tg_set_cfs_bandwidth, kernel/sched/core.c): at thousands of adopted
// jobs those walks were most of an adoption's time (BENCHMARKS.md, "Live
// restart"). Reading a file walks nothing. Errors: as New.
func (h *Hierarchy) NewExisting(rel string, res *specs.LinuxResources) (*Group, error) {
	rel, err := cleanRel(rel)
	if err != nil || rel == "" {
		return nil, fmt.Errorf("create cgroup %q: %w", rel, errors.Join(ErrInvalidPath, err))
	}
	if res == nil {
		res = &specs.LinuxResources{}
	}
	g := &Group{h: h, rel: rel, existing: true}
	err = h.v.create(g, res)
	g.existing = false
	if err != nil {
		return nil, err
	}
	g.setApplied(res)
	return g, nil
}

// Load returns the existing cgroup at rel. A group that exists in only some
// hierarchies (a partial delete) loads, so that it can be killed and deleted.
//
// Errors: rel is invalid; ErrNotExist when it exists in no hierarchy.
func (h *Hierarchy) Load(rel string) (*Group, error) {
	rel, err := cleanRel(rel)
	if err != nil || rel == "" {
		return nil, fmt.Errorf("load cgroup %q: %w", rel, errors.Join(ErrInvalidPath, err))
	}
	found := false
	for _, d := range h.dirs(rel) {
		if _, err := os.Stat(d); err == nil {
			found = true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("load cgroup %s: %w", rel, ErrNotExist)
	}
	g := &Group{h: h, rel: rel}
	if err := h.v.load(g); err != nil {
		return nil, err
	}
	return g, nil
}

// Path is the group's path relative to the hierarchy root.
func (g *Group) Path() string { return g.rel }

// Missing lists the group's directories that are gone, one per
// hierarchy in use (each v1 controller's, then the cgroup2 one): none
// while the group is whole. A cgroup removed from outside (rmdir(2) of
// an empty cgroup, by an operator or another manager) is missing in
// every hierarchy; Hierarchy.New makes it again.
func (g *Group) Missing() []string {
	var gone []string
	for _, d := range g.h.dirs(g.rel) {
		if _, err := os.Stat(d); errors.Is(err, fs.ErrNotExist) {
			gone = append(gone, d)
		}
	}
	return gone
}

// Placement returns where the group is: the cgroup2 directory and the
// cgroup.procs file of each v1 controller the group exists in. A process
// written into all of them is inside the group; ForkInside is how berth
// starts one there from birth.
func (g *Group) Placement() Placement {
	p := Placement{UnifiedDir: g.h.unifiedDir(g.rel)}
	for _, s := range g.h.subsystems {
		dir := filepath.Join(mountRoot, string(s.Name()), g.h.v1Roots[s.Name()], g.rel)
		if _, err := os.Stat(dir); err == nil {
			p.ProcsFiles = append(p.ProcsFiles, filepath.Join(dir, "cgroup.procs"))
		}
	}
	return p
}

// Update applies res in place: no process is moved or restarted. Nil fields
// are left as they are, so an update that changes only memory leaves the CPU
// quota exactly as the kernel holds it; a limit to be taken out is passed
// as the kernel's default (limits.Lift: -1 for memory, swap, CPU quota and
// pids, written "max"; an io throttle of rate 0, written "max" on v2 io.max
// and as "no rule" on v1). Rules as New.
//
// Errors: the group was deleted; the kernel refuses a value.
func (g *Group) Update(res *specs.LinuxResources) error {
	if res == nil {
		return nil
	}
	if err := g.h.v.update(g, res); err != nil {
		return err
	}
	g.setApplied(res)
	return nil
}
