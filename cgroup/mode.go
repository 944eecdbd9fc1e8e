package cgroup

import (
	"fmt"

	cgroups "github.com/containerd/cgroups/v3"
)

// Mode is the cgroup layout of the host, as detected by
// github.com/containerd/cgroups/v3.Mode (statfs of /sys/fs/cgroup and
// /sys/fs/cgroup/unified).
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

// String returns the mode's lower-case name ("unavailable", "legacy",
// "hybrid", "unified").
func (m Mode) String() string {
	switch m {
	case Unavailable:
		return "unavailable"
	case Legacy:
		return "legacy"
	case Hybrid:
		return "hybrid"
	case Unified:
		return "unified"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// DetectMode returns the host's cgroup layout. It is what Open uses; the
// result is computed once per process by containerd/cgroups.
func DetectMode() Mode {
	switch cgroups.Mode() {
	case cgroups.Legacy:
		return Legacy
	case cgroups.Hybrid:
		return Hybrid
	case cgroups.Unified:
		return Unified
	}
	return Unavailable
}

const (
	// mountRoot is where cgroup file systems are mounted (systemd's layout).
	mountRoot = "/sys/fs/cgroup"
	// hybridUnifiedMount is the controller-less cgroup2 mount of a hybrid host.
	hybridUnifiedMount = "/sys/fs/cgroup/unified"
)
