package api

import (
	"time"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/worker"
)

// Job is one job as GET /v1/jobs and GET /v1/jobs/{id} return it.
type Job struct {
	ID        string       `json:"id"`
	Connector string       `json:"connector"`
	Kind      string       `json:"kind"`           // "connector" or "task"
	Task      *int         `json:"task,omitempty"` // task index; absent for a connector job
	Group     string       `json:"group,omitempty"`
	State     worker.State `json:"state"`
	Reason    string       `json:"reason,omitempty"` // why the job is failed or waiting
	PID       int          `json:"pid,omitempty"`
	Cgroup    string       `json:"cgroup"` // as /proc/PID/cgroup names it
	StartedAt *time.Time   `json:"started_at,omitempty"`
	Restarts  int          `json:"restarts"`
	// NextRestart is when a job in state backoff starts again.
	NextRestart *time.Time    `json:"next_restart,omitempty"`
	LastExit    *worker.Exit  `json:"last_exit,omitempty"`
	Limits      limits.Limits `json:"limits"`
	Usage       *Usage        `json:"usage,omitempty"`
	Command     []string      `json:"command"`
}

// Usage is a job's cgroup accounting at the time of the request.
type Usage struct {
	CPUSeconds       float64 `json:"cpu_seconds"`        // user + system, seconds
	MemoryBytes      uint64  `json:"memory_bytes"`       // charged to the cgroup, bytes
	MemoryLimitBytes uint64  `json:"memory_limit_bytes"` // 0: unlimited
	OOMKills         uint64  `json:"oom_kills"`
	Pids             uint64  `json:"pids"`
}

// Agent is GET /v1/agent: this agent as a cluster member.
type Agent struct {
	ID         string `json:"id"`
	State      string `json:"state"` // joining | member | fenced
	Leader     bool   `json:"leader"`
	Generation int64  `json:"generation"`
	// LastRenewal is when the last successful renewal of the agent's
	// session lease was sent (RFC 3339, nanoseconds): the store cannot
	// expire the lease before LastRenewal + session_ttl. Absent while the
	// agent holds no session and for an agent without a store.
	LastRenewal *time.Time `json:"last_renewal,omitempty"`
	// LeaseDeadline is the local fencing deadline, LastRenewal +
	// session_ttl - max(1 s, session_ttl/5): without a renewal by then the
	// agent kills every worker. Absent when LastRenewal is.
	LeaseDeadline *time.Time `json:"lease_deadline,omitempty"`
}

// Member is one live member in GET /v1/members.
type Member struct {
	ID         string    `json:"id"`
	Protocol   string    `json:"protocol"`   // static or balanced (KIP-987)
	Connectors []string  `json:"connectors"` // declared static.connectors
	Tasks      []string  `json:"tasks"`      // declared static.tasks
	Addr       string    `json:"addr"`       // the agent's API address, host:port
	Started    time.Time `json:"started"`    // when its session joined (UTC)
}

// Conflict is a job declared by more than one member (KIP-987 static; the
// lowest member ID wins).
type Conflict struct {
	Job     string   `json:"job"`
	Members []string `json:"members"`
	Winner  string   `json:"winner"`
}

// Assignment is GET /v1/assignment: the published assignment.
type Assignment struct {
	Generation int64               `json:"generation"`
	Leader     string              `json:"leader"`
	Members    map[string][]string `json:"members"`    // member ID -> its job IDs
	Unassigned map[string]string   `json:"unassigned"` // job ID -> why no member runs it
	Conflicts  []Conflict          `json:"conflicts"`
}

// ConnectorInfo is GET /connectors/{name} in Kafka Connect's shape: the
// config flattened into Connect-style dotted string keys ("tasks.max",
// "task.command", "task.limits.memory"; list values JSON-encoded).
type ConnectorInfo struct {
	Name   string            `json:"name"`
	Config map[string]string `json:"config"`
	Tasks  []TaskRef         `json:"tasks"`
	Type   string            `json:"type"`
}

// TaskRef names one task of a connector (Connect's ConnectorTaskId).
type TaskRef struct {
	Connector string `json:"connector"`
	Task      int    `json:"task"`
}

// ConnectorStatus is GET /connectors/{name}/status in Kafka Connect's
// shape: the state of the connector's own job and of each task, with the
// agent that runs it as worker_id.
type ConnectorStatus struct {
	Name      string       `json:"name"`
	Connector *JobStatus   `json:"connector,omitempty"`
	Tasks     []TaskStatus `json:"tasks"`
	Type      string       `json:"type"`
}

// JobStatus is the state of one job in Connect's words (RUNNING, FAILED,
// UNASSIGNED, RESTARTING, STOPPED).
type JobStatus struct {
	State    string `json:"state"`
	WorkerID string `json:"worker_id"`
	Trace    string `json:"trace,omitempty"`
}

// TaskStatus is one task's JobStatus with its index.
type TaskStatus struct {
	ID int `json:"id"`
	JobStatus
}

// Error is the body of every 4xx and 5xx answer, as Kafka Connect's REST
// API writes it.
type Error struct {
	Code    int    `json:"error_code"`
	Message string `json:"message"`
}

// Error implements error: "HTTP 404: job x is not run by this agent".
func (e *Error) Error() string { return "HTTP " + itoa(e.Code) + ": " + e.Message }
