package memwatch

import (
	"path/filepath"

	"github.com/berthd/berth/cgroup"
)

// PressureFileName is the cgroup2 interface file of a cgroup's memory
// pressure (Documentation/accounting/psi.rst, "Cgroup2 interface").
const PressureFileName = "memory.pressure"

// Target names the files of one job's cgroup that a watch uses.
type Target struct {
	// PressureFile is the absolute path of memory.pressure of the job's
	// cgroup in the cgroup2 hierarchy: the pure v2 tree, or the tracking
	// tree of a hybrid host ("" on a legacy v1 host). PSI is hierarchical:
	// the job's cgroup covers each of its runs' leaves (run-<n>), and
	// outlives them.
	PressureFile string
	// V1Dir is the job's directory in the v1 memory controller ("" on a
	// unified host). When set, Watch watches the usage threshold there, not
	// PressureFile.
	V1Dir string
}

// TargetOf is the Target of g, a job's cgroup (cgroup.Hierarchy.New or
// Load): its directory in cgroup2 (cgroup.Placement.UnifiedDir, the
// directory that holds the runs' leaves and survives from run to run) and
// in the v1 memory controller (cgroup.Group.MemoryV1Dir).
func TargetOf(g *cgroup.Group) Target {
	var t Target
	if d := g.Placement().UnifiedDir; d != "" {
		t.PressureFile = filepath.Join(d, PressureFileName)
	}
	t.V1Dir = g.MemoryV1Dir()
	return t
}

// Mechanism is how a watch learns of a job's memory pressure.
type Mechanism uint8

const (
	// PSI is a pressure stall trigger written to memory.pressure, woken
	// with EPOLLPRI (cgroup v2; Documentation/accounting/psi.rst).
	PSI Mechanism = iota + 1
	// Threshold is a v1 memory usage threshold registered in
	// cgroup.event_control, woken through an eventfd(2) (cgroup v1;
	// Documentation/admin-guide/cgroup-v1/memory.rst "Memory thresholds").
	Threshold
)

// String is "psi" or "threshold".
func (m Mechanism) String() string {
	switch m {
	case PSI:
		return "psi"
	case Threshold:
		return "threshold"
	}
	return "unknown"
}

// Mechanism is what Watch uses for t: Threshold when t has a v1 memory
// directory, else PSI when it has a pressure file, else 0.
func (t Target) Mechanism() Mechanism {
	switch {
	case t.V1Dir != "":
		return Threshold
	case t.PressureFile != "":
		return PSI
	}
	return 0
}
