package cgroup

import specs "github.com/opencontainers/runtime-spec/specs-go"

// version is the cgroup version berth drives, chosen once by Open from the
// host's Mode: cgroupV1 on a legacy or hybrid host (the v1 controllers
// limit and account; a hybrid host's cgroup2 mount only tracks), cgroupV2
// on a unified host. Every operation whose kernel files differ between
// the versions goes through it; what each controller writes and reads is
// in the controller's own file (cpu.go, memory.go, io.go, pids.go,
// cpuset.go), and the operations the versions share (kill, delete,
// launch) use the hierarchy's directories directly.
type version interface {
	// prepare makes the root's subtrees (Hierarchy.Prepare).
	prepare() error
	// create makes g's cgroup and applies res (Hierarchy.New).
	create(g *Group, res *specs.LinuxResources) error
	// load opens g's existing cgroup (Hierarchy.Load).
	load(g *Group) error
	// update applies res to g's cgroup in place (Group.Update).
	update(g *Group, res *specs.LinuxResources) error
	// read reads g's usage from its files (Group.Usage); full adds what
	// Group.FullUsage adds. (It returns Usage by value: a pointer passed
	// through an interface method escapes, one allocation per job and
	// scrape.)
	read(g *Group, buf []byte, full bool) (Usage, error)
	// oomKills is Group.OOMKills.
	oomKills(g *Group) (uint64, error)
}

// versionFor returns the version that drives h, by h's mode.
func versionFor(h *Hierarchy) version {
	if h.mode == Unified {
		return cgroupV2{h}
	}
	return cgroupV1{h}
}
