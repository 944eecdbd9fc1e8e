package metrics

import (
	"time"

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
	// PressureRestarts and PressureNotified count the job's memory
	// pressure actions (memory_pressure restart and notify).
	PressureRestarts, PressureNotified uint64
	// Cgroup is the job's cgroup; nil when it has none (waiting, failed
	// before its cgroup was made).
	Cgroup *cgroup.Group
	// UpdateBlocked is true while the job's new definition cannot start on
	// this host and the job keeps running its previous one, or while the
	// kernel refuses one of its new limits in place.
	UpdateBlocked bool
}

// Group is one sharing group with jobs on this agent.
type Group struct {
	// Name is the group's name, the `group` label.
	Name string
	// Jobs counts the group's jobs on this agent.
	Jobs int
	// Cgroup is the group's parent cgroup, whose limits cap its jobs' sum.
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
	// Groups are the sharing groups with jobs on this agent, sorted by
	// name.
	Groups []Group
	// ReloadSuccessful is false when the last reload of the configuration
	// file was refused (true before any reload: the start loaded it).
	ReloadSuccessful bool
	// ReloadSuccessTime is when the file was last put in force (start or
	// a successful reload).
	ReloadSuccessTime time.Time
	// Membership is the agent's cluster session (the cluster collector).
	Membership Membership
}

// Membership is what the cluster collector reports of the agent's session.
type Membership struct {
	// Up is true while the agent holds a live session.
	Up bool
	// Conflicts counts jobs declared by more than one member in the
	// published assignment.
	Conflicts int
	// Fencings counts the times the agent lost its session and killed all
	// its workers since it started.
	Fencings uint64
	// LastRenewal is when the last successful renewal of the session's
	// lease was sent and Deadline the local fencing deadline it sets; both
	// zero while the agent holds no session (or has no store).
	LastRenewal, Deadline time.Time
}

// Lister gives the collectors the agent as one scrape sees it: its jobs,
// groups, assignment, last reload and cluster session.
type Lister interface {
	Snapshot() Snapshot
}
