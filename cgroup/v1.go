package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/berthd/berth/internal/kernfile"
	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// cgroupV1 drives the v1 controllers of a legacy or hybrid host through
// containerd's cgroup1, in one hierarchy per controller
// (Documentation/admin-guide/cgroup-v1/cgroups.rst). On a hybrid host the
// group is also made in the controller-less cgroup2 mount, without limits,
// for tracking, cgroup.kill and PSI.
type cgroupV1 struct{ h *Hierarchy }

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

func (v cgroupV1) prepare() error { return v.h.prepareV1() }

// create makes g in every v1 controller in use, applies res, and makes g
// in the cgroup2 tracking tree of a hybrid host.
func (v cgroupV1) create(g *Group, res *specs.LinuxResources) error {
	h := v.h
	err := func() error {
		// Create with no resources first, then apply: the memory limit
		// and the swap limit must be written in an order that keeps
		// memsw >= limit at every step (setMemoryAndSwap), which
		// containerd's Create does not do.
		if err := h.makeCpuset(g.rel); err != nil {
			return err
		}
		cg, err := cgroup1.New(h.v1Path(g.rel), &specs.LinuxResources{}, cgroup1.WithHierarchy(h.v1HierarchyNoCpuset), allowAnyController)
		if err != nil {
			return err
		}
		g.v1 = cg
		return v.apply(g, res)
	}()
	if err != nil {
		return fmt.Errorf("create cgroup %s in v1 controllers %v: %w", g.rel, h.Controllers(), err)
	}
	if d := h.unifiedDir(g.rel); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", d, err)
		}
	}
	return nil
}

func (v cgroupV1) load(g *Group) error {
	cg, err := cgroup1.Load(v.h.v1Path(g.rel), cgroup1.WithHierarchy(v.h.v1HierarchyNoCpuset), allowAnyController)
	if err != nil && !errors.Is(err, cgroup1.ErrCgroupDeleted) {
		return fmt.Errorf("load cgroup %s: %w", g.rel, err)
	}
	g.v1 = cg
	return nil
}

func (v cgroupV1) update(g *Group, res *specs.LinuxResources) error {
	if g.v1 == nil {
		return fmt.Errorf("update cgroup %s: %w", g.rel, ErrNotExist)
	}
	if err := v.apply(g, res); err != nil {
		return fmt.Errorf("update cgroup %s in v1 controllers %v: %w", g.rel, v.h.Controllers(), err)
	}
	return nil
}

// apply writes res to g's v1 cgroups: containerd's cgroup1 Update for
// what it writes right, each controller's own writes for the rest.
func (v cgroupV1) apply(g *Group, res *specs.LinuxResources) error {
	h := v.h
	for _, note := range Unenforced(h.mode, res) {
		h.log.Warn("cgroup limit not enforced", "cgroup", g.rel, "mode", h.mode.String(), "note", note)
	}
	r := *res
	r.CPU = h.skipSamePeriod(g.rel, res.CPU)
	if g.existing {
		r.CPU = h.skipSameCPU(g.rel, r.CPU)
	}
	r.Unified = nil // cgroup2 files: Unenforced above
	r.Devices = nil // berth does not use the devices controller
	r.Memory = h.memoryV1(g.rel, res.Memory)
	r.Pids = nil // pids.max is written by setPidsMax
	if m := r.Memory; m != nil && m.Limit != nil && m.Swap != nil {
		if err := h.setMemoryAndSwap(g.rel, *m.Limit, *m.Swap, g.existing); err != nil {
			return err
		}
		mm := *m
		mm.Limit, mm.Swap = nil, nil
		r.Memory = &mm
	}
	if err := g.v1.Update(&r); err != nil {
		return err
	}
	if c := res.CPU; c != nil {
		if err := h.setCpuset(g.rel, c.Cpus, c.Mems, g.existing); err != nil {
			return err
		}
	}
	if res.Pids != nil && res.Pids.Limit != nil {
		return h.setPidsMax(g.rel, *res.Pids.Limit, g.existing)
	}
	return nil
}

func (v cgroupV1) read(g *Group, buf []byte, full bool) (Usage, error) {
	var u Usage
	if full && g.v1 == nil {
		return u, ErrNotExist // gone from every v1 controller
	}
	d := v.h.dirsFor(g)
	pass := func(err error) error {
		if full {
			return optional(err)
		}
		return err
	}
	err := errors.Join(
		pass(readCPUV1(d, buf, &u, full)),
		pass(g.readMemoryV1(d.memory, buf, &u, full)),
		pass(readPids(d.pids, buf, &u, full)),
	)
	if err != nil || !full {
		return u, err
	}
	if err := optional(readIOV1(v.h.v1Dir(cgroup1.Blkio, g.rel), &u)); err != nil {
		return u, err
	}
	if n, err := g.OOMKills(); err == nil {
		u.OOMKills = n
	} else if !errors.Is(err, ErrNotExist) {
		return u, err
	}
	return u, nil
}

func (v cgroupV1) oomKills(g *Group) (uint64, error) { return v.h.oomKillsV1(g.rel) }

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

// Unenforced lists, one note per item, the parts of res that a host in mode
// m does not enforce: on v1 (Legacy, Hybrid) every res.Unified key
// (memory.high has no v1 equivalent; an exact cpu.weight is carried by
// res.CPU.Shares instead), since Unified is a cgroup v2 map
// (runtime-spec config-linux.md "Unified"), and res.Memory.Reservation,
// v2 memory.low, which v1 has no protection for (memoryV1).
func Unenforced(m Mode, res *specs.LinuxResources) []string {
	if res == nil || m == Unified {
		return nil
	}
	var notes []string
	if mem := res.Memory; mem != nil && mem.Reservation != nil && *mem.Reservation != 0 { // 0: the kernel's default (limits.Lift)
		notes = append(notes, fmt.Sprintf("memory.low=%d is not enforced on cgroup v1 (no equivalent: memory.soft_limit_in_bytes makes a cgroup the first reclaimed above it); nothing is written", *mem.Reservation))
	}
	var keys []string
	for k := range res.Unified {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch v := res.Unified[k]; {
		case k == "memory.high" && v == "max", k == "cpu.weight" && v == "100", k == "io.weight" && v == "default 100":
			continue // the kernel's default (limits.Lift): nothing to enforce
		}
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

// allowAnyController makes containerd skip controllers that are not active
// instead of failing (berth does not require the devices controller).
func allowAnyController(c *cgroup1.InitConfig) error {
	c.InitCheck = cgroup1.AllowAny
	return nil
}

// isGone reports whether err says the cgroup file or directory is gone.
func isGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist)
}

// skipSamePeriod is c without its CFS period when g's cpu.cfs_period_us
// already holds it (a new cgroup has the kernel's default, 100 ms, which
// is what every job without cpu_period asks for): each write of
// cpu.cfs_period_us or cpu.cfs_quota_us makes the kernel check the
// bandwidth of every task group on the host (tg_set_cfs_bandwidth walks
// the whole tree under a global mutex), so a write spared is a walk spared,
// and at thousands of jobs that walk is much of a start's cost
// (BENCHMARKS.md). Reading the file costs no walk.
func (h *Hierarchy) skipSamePeriod(rel string, c *specs.LinuxCPU) *specs.LinuxCPU {
	if c == nil || c.Period == nil {
		return c
	}
	dir := h.v1Dir(cgroup1.Cpu, rel)
	if dir == "" {
		return c
	}
	cur, err := kernfile.Read(filepath.Join(dir, "cpu.cfs_period_us"))
	if err != nil || strings.TrimSpace(string(cur)) != strconv.FormatUint(*c.Period, 10) {
		return c
	}
	cc := *c
	cc.Period = nil
	return &cc
}

// skipSameCPU is c without the v1 cpu.shares and cpu.cfs_quota_us that
// rel's files already hold (NewExisting): the quota's write walks every
// task group of the host (skipSamePeriod). A file that cannot be read is
// written.
func (h *Hierarchy) skipSameCPU(rel string, c *specs.LinuxCPU) *specs.LinuxCPU {
	if c == nil || (c.Shares == nil && c.Quota == nil) {
		return c
	}
	dir := h.v1Dir(cgroup1.Cpu, rel)
	if dir == "" {
		return c
	}
	holds := func(file, want string) bool {
		cur, err := kernfile.Read(filepath.Join(dir, file))
		return err == nil && strings.TrimSpace(string(cur)) == want
	}
	cc := *c
	if c.Shares != nil && holds("cpu.shares", strconv.FormatUint(*c.Shares, 10)) {
		cc.Shares = nil
	}
	if c.Quota != nil && holds("cpu.cfs_quota_us", strconv.FormatInt(quotaV1(*c.Quota), 10)) {
		cc.Quota = nil
	}
	return &cc
}

// quotaV1 is how cpu.cfs_quota_us reads back a written quota: any
// negative number as -1 (no limit; Documentation/scheduler/sched-bwc.rst).
func quotaV1(q int64) int64 {
	if q < 0 {
		return -1
	}
	return q
}
