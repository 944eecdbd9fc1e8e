package supervisor

import (
	"reflect"
	"strings"

	"github.com/berthd/berth/config"
	"github.com/berthd/berth/internal/retry"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/supervisor/apply"
	"github.com/berthd/berth/supervisor/plan"
)

// updateJob applies in place what changed without needing a new process:
// the limits (written to the job's cgroup; a removed one as the kernel's
// default, limits.Lift) and the restart policy and stop timeout (handed to
// its worker). The process keeps running.
//
// A limit the kernel refuses (memory below the group's usage on cgroup v1:
// EBUSY) does not keep the others from being applied: each resource is
// then written on its own (applyLimits), the refused ones are reported
// (job.refused: the API's update_blocked, berth status,
// berth_job_update_blocked, one log line per new reason) and tried again
// at each reconcile, and with backoff meanwhile, until the kernel accepts
// them (the job's usage fell) or a later definition changes them.
func (e *executor) updateJob(cur *job, nj spec.Job) {
	if op, np := cur.spec.Process, nj.Process; cur.w != nil && (op.Restart != np.Restart || op.StopTimeout != np.StopTimeout ||
		op.KillMode != np.KillMode || op.KillSignal != np.KillSignal) {
		cur.w.Retune(np.Restart, np.StopTimeout, np.KillMode, np.KillSignal.Number())
		var o, n spec.Job
		o.Process.Restart, o.Process.StopTimeout, o.Process.KillMode, o.Process.KillSignal = op.Restart, op.StopTimeout, op.KillMode, op.KillSignal
		n.Process.Restart, n.Process.StopTimeout, n.Process.KillMode, n.Process.KillSignal = np.Restart, np.StopTimeout, np.KillMode, np.KillSignal
		e.log.Info("job restart and stop settings updated in place; they apply at its next exit or stop",
			"job_id", nj.ID, "changes", changeList(config.DiffJobs(o, n)))
	}
	res, notes, err := nj.Process.Limits.Resources(nil)
	if err != nil {
		e.log.Error("job limits", "job_id", nj.ID, "error", err)
		return
	}
	applied := cur.res
	refused := ""
	if cur.group != nil && !reflect.DeepEqual(cur.res, res) {
		e.tbl.mu.RLock()
		wasRefused := cur.refused
		e.tbl.mu.RUnlock()
		if wasRefused == "" {
			for _, n := range notes {
				e.log.Info("job limits", "job_id", nj.ID, "note", n)
			}
		}
		prev := cur.res
		if prev == nil { // refused last time: the last definition's
			prev, _, _ = cur.spec.Process.Limits.Resources(nil)
		}
		refused = strings.Join(apply.Update(cur.group, prev, res), "; ")
		switch {
		case refused != "":
			// Some resources hold the new values, some the old: nothing
			// to compare the next definition against, so it is written
			// whatever it is (a definition going back to the old values
			// must undo the accepted part).
			applied = nil
		case wasRefused != "":
			applied = res
			e.log.Info("job limits accepted by the kernel now; all are in force", "job_id", nj.ID, "changes", changeList(config.DiffJobs(cur.spec, nj)))
		default:
			applied = res
			e.log.Info("job limits updated in place", "job_id", nj.ID, "changes", changeList(config.DiffJobs(cur.spec, nj)))
		}
		if refused != "" && refused != wasRefused {
			e.log.Error("the kernel refused some job limits; the others are in force, the refused ones are tried again at every reconcile",
				"job_id", nj.ID, "refused", refused, "changes", changeList(config.DiffJobs(cur.spec, nj)))
		}
	}
	if refused == "" {
		e.rewatch(cur, cur.spec, nj)
	}
	e.tbl.mu.Lock()
	cur.res, cur.spec, cur.refused = applied, nj, refused
	switch {
	case refused != "":
		// Try again when the job's usage may have changed, not only when
		// the source next changes.
		e.tbl.retries.Failed(nj.ID, retry.Store(), e.clock.Now())
	case cur.blocked == "" && cur.phase == plan.Running:
		e.tbl.retries.Forget(nj.ID)
	}
	e.tbl.mu.Unlock()
}
