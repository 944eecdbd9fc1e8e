package supervisor

import (
	"fmt"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/cgroup/memwatch"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/supervisor/plan"
	"github.com/berthd/berth/worker"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// transitions lists the phases a job may move to in place from each phase.
// A start replaces a job's entry instead (a new job value, whatever it was
// before), so only moves of a job that keeps its entry are listed: a
// running job stopped for a restart request, a held job's target changing
// between paused and stopped.
var transitions = map[plan.Phase][]plan.Phase{
	plan.Running: {plan.Restarting},
	plan.Held:    {plan.Held},
}

// job is one assigned job as the agent runs it: its definition, its phase
// and what the phase carries. Fields other than spec, phase and the
// notes are set once when the job's entry is made.
type job struct {
	spec  spec.Job
	phase plan.Phase
	// err says why a Failed or Waiting job is not running (its cgroup could
	// not be made, its limits not resolved, its claim not taken);
	// permanent says it cannot heal by waiting (the kernel refused a
	// value): retried only on reload or a new definition.
	err       string
	permanent bool
	// holder is the member that holds a Waiting job's claim ("?" when the
	// store did not answer).
	holder string
	// claimed is true once this agent holds the job's claim; it is
	// released only when no process of the job is left. unsure is true
	// for a Waiting job whose claim call failed: the store may have
	// written the claim all the same (a transaction that committed but
	// whose answer was lost), so it is released too when the job goes.
	claimed bool
	unsure  bool
	// target is a Held job's target state, with who set it and when.
	target spec.TargetState
	heldBy string
	heldAt time.Time

	// Running only: the job's resources as written, its cgroup and its
	// worker.
	res   *specs.LinuxResources
	group *cgroup.Group
	w     *worker.Worker
	// watch is the job's memory pressure watch (memory_pressure notify or
	// restart), nil when it has none; pressureRestarts and
	// pressureNotified count the actions taken on it
	// (berth_job_memory_pressure_actions_total).
	watch            *memwatch.Handle
	pressureRestarts uint64
	pressureNotified uint64

	// Notes on a Running job. blocked is why its new definition cannot
	// start on this host (the worker keeps the previous one); refused
	// names the limits the kernel refused in place ("; " between them).
	blocked string
	refused string
}

// move changes the job's phase in place; it panics on a move transitions
// does not list (a programming error: the executor must replace the entry
// instead). Callers hold the agent's mu.
func (j *job) move(to plan.Phase) {
	for _, p := range transitions[j.phase] {
		if p == to {
			j.phase = to
			return
		}
	}
	panic(fmt.Sprintf("job %s: no transition from %s to %s", j.spec.ID, j.phase, to))
}

// status is the job's state and why, as the view reports it: the worker's
// own status for a Running job, a state named for the phase otherwise.
func (j *job) status() (worker.Status, string) {
	switch j.phase {
	case plan.Restarting:
		return worker.Status{State: worker.Restarting}, "restart requested"
	case plan.Held:
		st := worker.Stopped
		if j.target == spec.TargetPaused {
			st = worker.Paused
		}
		return worker.Status{State: st}, heldReason(string(j.target), j.heldBy, j.heldAt)
	case plan.Waiting:
		reason := "claim held by " + j.holder
		if j.err != "" {
			reason = j.err
		}
		return worker.Status{State: worker.Waiting}, reason
	case plan.Failed:
		return worker.Status{State: worker.Failed}, j.err
	}
	if j.w == nil {
		return worker.Status{State: worker.Failed}, j.err
	}
	st := j.w.Status()
	return st, st.Reason
}

// heldReason says who paused or stopped a job and when.
func heldReason(what, by string, at time.Time) string {
	r := what
	if by != "" {
		r += " by " + by
	}
	if !at.IsZero() {
		r += " at " + at.UTC().Format(time.RFC3339)
	}
	return r
}

// updateBlocked says why the job does not run its definition in force as
// a whole: its new definition cannot start here (blocked), or the kernel
// refused some of its limits (refused); "" when neither. The agent's mu
// is held.
func (j *job) updateBlocked() string {
	switch {
	case j.blocked != "" && j.refused != "":
		return j.blocked + "; " + j.refused
	case j.blocked != "":
		return j.blocked
	}
	return j.refused
}

// groupNode is a sharing group's parent cgroup, holding the group's limits.
type groupNode struct {
	name   string
	limits limits.Limits
	res    *specs.LinuxResources
	group  *cgroup.Group
}
