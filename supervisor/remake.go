package supervisor

import (
	"fmt"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/supervisor/apply"
)

// remake is the worker's Spec.Remake of job id, whose cgroup g is at rel:
// before each restart, when g is gone from any hierarchy (removed from
// outside between two runs: docs/cases.md C33), it makes the cgroup again
// with the job's limits in force (the ones last written, else the
// definition's), so that the job restarts by its policy in its own
// cgroup, never unlimited and never failed for good. The worker keeps
// its handle g: the directories are at the same paths. It returns the
// directories that were gone.
//
// Errors: the limits do not resolve or the kernel refuses the cgroup
// (cgroup.Hierarchy.New).
func (e *executor) remake(id, rel string, g *cgroup.Group) func() ([]string, error) {
	return func() ([]string, error) {
		gone := g.Missing()
		if len(gone) == 0 {
			return nil, nil
		}
		e.tbl.mu.RLock()
		cur := e.tbl.jobs[id]
		if cur == nil || cur.group != g {
			e.tbl.mu.RUnlock()
			return nil, nil // no longer this worker's job: it is being stopped
		}
		res, spec := cur.res, cur.spec
		e.tbl.mu.RUnlock()
		if res == nil {
			var err error
			if res, _, err = spec.Process.Limits.Resources(nil); err != nil {
				return gone, fmt.Errorf("make cgroup %s again: %w", rel, err)
			}
		}
		if _, err := apply.New(e.hier, e.log, rel, res, false); err != nil {
			return gone, fmt.Errorf("make cgroup %s again: %w", rel, err)
		}
		e.log.Warn("the job's cgroup was gone (removed from outside): made again with its limits before its restart",
			"job_id", id, "cgroup", rel, "missing", len(gone))
		return gone, nil
	}
}
