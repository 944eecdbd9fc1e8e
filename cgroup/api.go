// Package cgroup manages berth's per-job control groups over
// github.com/containerd/cgroups/v3, on cgroup v1 (legacy and hybrid) and
// cgroup v2 (unified).
//
// THIS FILE IS THE CONTRACT STUB written before the implementation; the
// cgroup implementation replaces the bodies (and may split the file), keeping
// these names and signatures.
package cgroup

import (
	"context"
	"errors"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Mode is the cgroup layout of the host.
type Mode int

const (
	// Unavailable: no cgroup file system is mounted.
	Unavailable Mode = iota
	// Legacy: only cgroup v1 hierarchies are mounted.
	Legacy
	// Hybrid: v1 controllers plus a cgroup2 mount at /sys/fs/cgroup/unified.
	Hybrid
	// Unified: only cgroup v2 is mounted at /sys/fs/cgroup.
	Unified
)

var errStub = errors.New("cgroup: not implemented")

// Hierarchy is berth's subtree (cgroup_root) in every mounted hierarchy.
type Hierarchy struct{}

// Open detects the host's Mode and returns the hierarchy rooted at root
// (relative, e.g. "berth").
func Open(root string) (*Hierarchy, error) { return nil, errStub }

// Mode reports the detected layout.
func (h *Hierarchy) Mode() Mode { return Unavailable }

// New creates (or loads, when it exists) the cgroup at rel under the root,
// e.g. "jobs/orders-sink-0" or "jobs/g-sinks/orders-sink-0", and applies res.
func (h *Hierarchy) New(rel string, res *specs.LinuxResources) (*Group, error) { return nil, errStub }

// Load returns the existing cgroup at rel.
func (h *Hierarchy) Load(rel string) (*Group, error) { return nil, errStub }

// Children lists the names of the child cgroups of rel.
func (h *Hierarchy) Children(rel string) ([]string, error) { return nil, errStub }

// Group is one cgroup (a job's or a sharing group's) in every hierarchy.
type Group struct{}

// Placement says where a new process must be put to run inside a Group.
type Placement struct {
	// UnifiedDir is the absolute directory of the group in the cgroup2
	// hierarchy ("" when there is none); clone3(CLONE_INTO_CGROUP) with an
	// fd of this directory starts a child inside it.
	UnifiedDir string
	// ProcsFiles are the absolute paths of the group's cgroup.procs file in
	// each v1 hierarchy (empty on a pure v2 host). A process written into
	// all of them is inside the group.
	ProcsFiles []string
}

// Path is the group's path relative to the hierarchy root.
func (g *Group) Path() string { return "" }

// Placement returns where processes of this group must be born.
func (g *Group) Placement() Placement { return Placement{} }

// Update applies res in place.
func (g *Group) Update(res *specs.LinuxResources) error { return errStub }

// Pids lists every process in the group and its descendants.
func (g *Group) Pids() ([]int, error) { return nil, errStub }

// OOMKills returns the kernel's count of OOM kills in the group.
func (g *Group) OOMKills() (uint64, error) { return 0, errStub }

// Kill kills every process in the group and returns once it is empty.
func (g *Group) Kill(ctx context.Context) error { return errStub }

// Delete removes the group from every hierarchy, retrying while busy.
func (g *Group) Delete(ctx context.Context) error { return errStub }
