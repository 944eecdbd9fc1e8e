package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/berthd/berth/internal/kernfile"
	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Layout names under the root (see the package doc).
const (
	// AgentDir is the leaf the agent moves itself into on cgroup v2 when it
	// starts in the root of its delegated cgroup.
	AgentDir = "agent"
	// JobsDir holds the cgroup of every job that is in no sharing group:
	// <root>/jobs/<job>.
	JobsDir = "jobs"
	// GroupsDir holds every sharing group's cgroup and, below it, the
	// cgroups of the group's jobs: <root>/groups/<group>/<job>.
	GroupsDir = "groups"
)

// Subtrees are the directories under the root that hold workload cgroups,
// in the order Prepare makes them: everything below them is a job's or a
// sharing group's, and nothing else is.
func Subtrees() []string { return []string{JobsDir, GroupsDir} }

// JobRel is the cgroup of job id relative to the root: "jobs/<id>" for a
// job in no sharing group, "groups/<group>/<id>" for a job of group. Jobs
// and groups live in separate subtrees, so the map from job IDs and group
// names (each one path element, unique among its kind) to cgroups is
// one-to-one by construction: no job can take a group's directory, whatever
// the names.
func JobRel(id, group string) string {
	if group != "" {
		return GroupRel(group) + "/" + id
	}
	return JobsDir + "/" + id
}

// GroupRel is sharing group name's cgroup relative to the root,
// "groups/<name>"; its limits cap the sum of its jobs'.
func GroupRel(name string) string { return GroupsDir + "/" + name }

// Prepare makes the root ready for jobs, idempotently (a restarted agent calls
// it again).
//
// v1 and hybrid: creates <root>, <root>/jobs and <root>/groups in every v1
// controller in use (cpuset.cpus and cpuset.mems copied from the parent,
// because a v1 cpuset child starts empty and refuses tasks) and in the
// cgroup2 hierarchy.
//
// Unified (v2): creates <root>/jobs and <root>/groups; when processes sit in <root> itself (the
// agent started by systemd with Delegate=yes), moves them into <root>/agent
// first, because a cgroup with processes cannot enable controllers for its
// children (cgroup-v2.rst "No Internal Process Constraint"); then enables
// cpu, cpuset, io, memory and pids (those listed in cgroup.controllers) in
// cgroup.subtree_control of every cgroup from the top down to <root>/jobs
// and <root>/groups.
// The top is the mount root, or <root> itself for a delegated root
// (OpenDelegated), above which berth may not write.
//
// Errors: a directory cannot be made; a process cannot be moved; the kernel
// refuses to enable a controller (EBUSY when a cgroup on the way still holds
// processes, ENOENT when the parent has not enabled it).
func (h *Hierarchy) Prepare() error { return h.v.prepare() }

// prepareV1 makes the subtrees in every v1 controller in use and in the
// cgroup2 tracking tree of a hybrid host.
func (h *Hierarchy) prepareV1() error {
	for _, sub := range Subtrees() {
		if _, err := cgroup1.New(h.v1Path(sub), &specs.LinuxResources{}, cgroup1.WithHierarchy(h.v1Hierarchy), allowAnyController); err != nil {
			return fmt.Errorf("prepare cgroup root %s in v1 controllers %v: %w", h.root, h.Controllers(), err)
		}
		// A cpuset made below the subtree then starts with its parent's
		// cpuset.cpus and cpuset.mems (cgroup-v1/cgroups.rst,
		// cgroup.clone_children; the flag passes to the children made
		// afterwards), so makeCpuset writes neither: each write of
		// cpuset.cpus has the kernel check every sibling and rebuild the
		// scheduling domains, walking every cpuset on the host, a cost that
		// grows with the number of jobs (BENCHMARKS.md).
		if d := h.v1Dir(cgroup1.Cpuset, sub); d != "" {
			if err := kernfile.Write(filepath.Join(d, "cgroup.clone_children"), "1"); err != nil {
				return fmt.Errorf("prepare cgroup root: %w", err)
			}
		}
		if d := h.unifiedDir(sub); d != "" {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("prepare cgroup root: create %s: %w", d, err)
			}
		}
	}
	return nil
}

// prepareV2 makes the subtrees on a unified host, moves the processes of
// the root into its agent leaf, and enables berth's controllers down to
// the subtrees.
func (h *Hierarchy) prepareV2() error {
	rootDir := h.unifiedDir("")
	for _, sub := range Subtrees() {
		if err := os.MkdirAll(filepath.Join(rootDir, sub), 0o755); err != nil {
			return fmt.Errorf("prepare cgroup root: create %s: %w", filepath.Join(rootDir, sub), err)
		}
	}
	if err := h.evacuateRoot(); err != nil {
		return err
	}
	top := h.unifiedMount
	if h.delegated {
		top = rootDir
	}
	// From the top down to the root, then each subtree.
	levels := []string{top}
	rel, err := filepath.Rel(top, rootDir)
	if err != nil {
		return fmt.Errorf("prepare cgroup root: %w", err)
	}
	cur := top
	for _, part := range strings.Split(rel, "/") {
		if part == "." {
			continue
		}
		cur = filepath.Join(cur, part)
		levels = append(levels, cur)
	}
	for _, sub := range Subtrees() {
		levels = append(levels, filepath.Join(rootDir, sub))
	}
	for _, dir := range levels {
		if err := enableControllers(dir); err != nil {
			return fmt.Errorf("prepare cgroup root: %w", err)
		}
	}
	return nil
}

// evacuateRoot moves every process in the root cgroup (normally just the
// agent) into <root>/agent.
func (h *Hierarchy) evacuateRoot() error {
	rootDir := h.unifiedDir("")
	if h.unifiedRoot == "/" {
		return nil // the mount root is exempt from the no-internal-process rule
	}
	data, err := os.ReadFile(filepath.Join(rootDir, "cgroup.procs"))
	if err != nil {
		return fmt.Errorf("prepare cgroup root: read %s: %w", filepath.Join(rootDir, "cgroup.procs"), err)
	}
	pids := strings.Fields(string(data))
	if len(pids) == 0 {
		return nil
	}
	agent := filepath.Join(rootDir, AgentDir)
	if err := os.MkdirAll(agent, 0o755); err != nil {
		return fmt.Errorf("prepare cgroup root: create %s: %w", agent, err)
	}
	// Move ourselves first: the agent must leave before it enables
	// controllers.
	self := strconv.Itoa(os.Getpid())
	slices.SortFunc(pids, func(a, b string) int {
		if a == self {
			return -1
		}
		if b == self {
			return 1
		}
		return strings.Compare(a, b)
	})
	procs := filepath.Join(agent, "cgroup.procs")
	for _, pid := range pids {
		if err := os.WriteFile(procs, []byte(pid), 0); err != nil && !isNoProcess(err) {
			return fmt.Errorf("prepare cgroup root: move process %s into %s: %w", pid, agent, err)
		}
	}
	return nil
}

// enableControllers enables berth's controllers that dir's parent offers in
// dir/cgroup.subtree_control, writing only the ones not yet enabled.
func enableControllers(dir string) error {
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Join(dir, "cgroup.controllers"), err)
	}
	enabled, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Join(dir, "cgroup.subtree_control"), err)
	}
	var add []string
	for _, c := range v2Controllers {
		if slices.Contains(strings.Fields(string(avail)), c) && !slices.Contains(strings.Fields(string(enabled)), c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	f := filepath.Join(dir, "cgroup.subtree_control")
	if err := os.WriteFile(f, []byte(strings.Join(add, " ")), 0); err != nil {
		return fmt.Errorf("enable controllers %v in %s: %w", add, f, err)
	}
	return nil
}
