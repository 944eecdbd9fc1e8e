package metrics

import (
	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/worker"
)

// Job is what the collectors need of one job at scrape time.
type Job struct {
	// ID, Connector, Kind ("connector" or "task") and Group ("" for none)
	// are the job's labels.
	ID, Connector, Kind, Group string
	// State is the job's state (a worker state or waiting).
	State worker.State
	// Restarts counts restarts of the job's worker after it ended.
	Restarts int
	// Cgroup is the job's cgroup; nil when it has none (waiting, failed
	// before its cgroup was made).
	Cgroup *cgroup.Group
}

// Snapshot is the agent as one scrape sees it.
type Snapshot struct {
	// Jobs are the jobs the agent runs, sorted by ID.
	Jobs []Job
	// Assigned holds the IDs of the jobs assigned to this agent: their
	// counter history is kept even while the job is between two workers.
	Assigned map[string]bool
	// Generation is the assignment generation the agent runs.
	Generation int64
	// Unassigned counts jobs that exist but that no agent runs.
	Unassigned int
}

// Lister gives the collectors the agent's jobs; the agent implements it.
type Lister interface {
	Snapshot() Snapshot
}

// labels are a job's label values, in jobLabels order.
func (j *Job) labels() []string { return []string{j.ID, j.Connector, j.Kind, j.Group} }
