package supervisor

import (
	"maps"
	"path"
	"slices"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/supervisor/plan"
	"github.com/berthd/berth/worker"
)

// JobView is one job as the agent runs it, read-only: what the API and the
// metrics adapt from.
type JobView struct {
	// Spec is the definition in force for the job.
	Spec spec.Job
	// Phase is where the job stands; Status its worker's state (or a state
	// named for the phase when it has no worker) and Reason why it is not
	// running, "" when it is.
	Phase  plan.Phase
	Status worker.Status
	Reason string
	// Cgroup is the job's cgroup path as /proc/PID/cgroup names it;
	// Group the cgroup itself for usage reads, nil when it has none
	// (waiting, failed before its cgroup was made, held).
	Cgroup string
	Group  *cgroup.Group
	// UpdateBlocked says why the job does not run its definition in force
	// as a whole: its new definition cannot start on this host, or the
	// kernel refused some limits in place; "" when neither.
	UpdateBlocked string
	// PressureRestarts and PressureNotified count the memory pressure
	// actions taken for the job (memory_pressure restart and notify)
	// since this agent made its entry.
	PressureRestarts, PressureNotified uint64
}

// GroupView is a sharing group with jobs on this agent.
type GroupView struct {
	Name string
	// Cgroup is the group's parent cgroup path; Group the cgroup itself.
	Cgroup string
	Group  *cgroup.Group
	// Limits are the group's limits in force.
	Limits limits.Limits
	// Jobs are the IDs of the group's jobs here, sorted.
	Jobs []string
}

// View is the agent's jobs and groups at one moment.
type View struct {
	// Jobs are sorted by ID; Groups by name.
	Jobs   []JobView
	Groups []GroupView
	// Desired is the assignment of the last pass; Assigned the IDs of its
	// jobs that have a definition.
	Desired  source.Desired
	Assigned map[string]bool
}

// View returns the agent's jobs and groups now.
func (a *Agent) View() View {
	js := a.tbl.all()
	a.tbl.mu.RLock()
	defer a.tbl.mu.RUnlock()
	v := View{Jobs: make([]JobView, 0, len(js)), Desired: a.tbl.desired, Assigned: a.tbl.assigned}
	members := map[string][]string{}
	for _, j := range js {
		v.Jobs = append(v.Jobs, a.jobView(j))
		if j.spec.Group != "" {
			members[j.spec.Group] = append(members[j.spec.Group], j.spec.ID)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(a.tbl.groups)) {
		g := a.tbl.groups[name]
		gv := GroupView{Name: name, Cgroup: path.Join("/", a.hier.Root(), cgroup.GroupRel(name)), Group: g.group,
			Limits: g.limits, Jobs: members[name]}
		if gv.Jobs == nil {
			gv.Jobs = []string{}
		}
		v.Groups = append(v.Groups, gv)
	}
	return v
}

// Tally is how many of the agent's jobs stand where, as the agent's
// one-line status reports them (sd_notify STATUS=, the "agent ready"
// line), and the generation of the assignment of the last pass.
type Tally struct {
	// Waiting for a claim; Failed (the phase, or the worker's state);
	// Running (the worker's state); Other: any other state.
	Waiting, Failed, Running, Other int
	Generation                      int64
}

// Tally counts the jobs without a view of each: View copies every job's
// definition, a third of a second at 5,000 jobs on a busy host.
func (a *Agent) Tally() Tally {
	a.tbl.mu.RLock()
	defer a.tbl.mu.RUnlock()
	t := Tally{Generation: a.tbl.desired.Generation}
	for _, j := range a.tbl.jobs {
		st, _ := j.status()
		switch {
		case j.phase == plan.Waiting:
			t.Waiting++
		case j.phase == plan.Failed || st.State == worker.Failed:
			t.Failed++
		case st.State == worker.Running:
			t.Running++
		default:
			t.Other++
		}
	}
	return t
}

// Job returns job id's view; false when the agent has no such job.
func (a *Agent) Job(id string) (JobView, bool) {
	a.tbl.mu.RLock()
	defer a.tbl.mu.RUnlock()
	j := a.tbl.jobs[id]
	if j == nil {
		return JobView{}, false
	}
	return a.jobView(j), true
}

// jobView is j's view; the table's mu is held.
func (a *Agent) jobView(j *job) JobView {
	st, reason := j.status()
	return JobView{Spec: j.spec, Phase: j.phase, Status: st, Reason: reason, Cgroup: a.exec.cgroupPath(j.spec),
		Group: j.group, UpdateBlocked: j.updateBlocked(), PressureRestarts: j.pressureRestarts, PressureNotified: j.pressureNotified}
}

// longest returns the longest stop timeout of the jobs in force and the
// agent's own: a bound for one pass of the loop. It reads the table, not
// a View (which copies every job: Healthy asks while a pass runs).
func (t *table) longest(agent time.Duration) time.Duration {
	t.mu.RLock()
	defer t.mu.RUnlock()
	longest := agent
	for _, j := range t.jobs {
		longest = max(longest, j.spec.Process.StopTimeout)
	}
	return longest
}
