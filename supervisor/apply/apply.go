package apply

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/limits"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// New makes (or loads) the cgroup rel with res, as cgroup.Hierarchy.New.
// When adopted is true the cgroup is an earlier agent's, holding an
// adopted run and the limits that agent wrote: res is written with the
// kernel's default for every limit it does not set (limits.Defaults), and
// every io throttle the cgroup holds on a device or rate res does not set
// lifted (read back with cgroup.Hierarchy.Throttles; a read failure is logged
// on log and those throttles stay); a limit the cgroup's file already
// holds is not written again (cgroup.Hierarchy.NewExisting: an adopted
// job's limits are mostly unchanged, and a CFS quota's write walks every
// task group of the host). A fresh cgroup holds the defaults already:
// nothing more is written for it.
//
// Errors: as cgroup.Hierarchy.New.
func New(h *cgroup.Hierarchy, log *slog.Logger, rel string, res *specs.LinuxResources, adopted bool) (*cgroup.Group, error) {
	write := res
	if adopted {
		write = limits.Defaults(res)
		io, err := h.Throttles(rel)
		if err != nil {
			log.Warn("read the io limits of an adopted cgroup; those removed from the definition stay in force", "cgroup", rel, "error", err)
		} else if io != nil {
			write = limits.Lift(&specs.LinuxResources{BlockIO: io}, write)
		}
		return h.NewExisting(rel, write)
	}
	return h.New(rel, write)
}

// Update writes next into g in place. A limit prev set and next does not
// is written as the kernel's default (limits.Lift), so that it is taken
// out of the cgroup rather than left as it was (prev is what was last
// written: the previous definition's resources). When the kernel refuses
// the whole (memory below the usage on cgroup v1: EBUSY), each resource
// is written on its own, so that a refused one keeps no other out. It
// returns one line per refused resource: its key, the value asked and the
// kernel's error; nil when all are in force.
func Update(g *cgroup.Group, prev, next *specs.LinuxResources) []string {
	write := limits.Lift(prev, next)
	if err := g.Update(write); err == nil {
		return nil
	}
	var out []string
	for _, p := range limits.Pieces(write) {
		if err := g.Update(p.Resources); err != nil {
			val, _ := json.Marshal(p.Value)
			out = append(out, fmt.Sprintf("limit %s = %s refused by the kernel: %v", p.Key, val, err))
		}
	}
	return out
}
