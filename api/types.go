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
	Reason    string       `json:"reason,omitempty"` // why the job is failed, waiting, paused or stopped
	// Trace says why a job is FAILED in Connect's terms (ConnectState): the
	// start error or how its last run ended (exit status, signal, OOM
	// kill), then the last lines of its log; empty otherwise.
	Trace string `json:"trace,omitempty"`
	// UpdateBlocked says why the job's new definition cannot start on this
	// host (user, program or working directory missing; the job keeps
	// running its previous definition meanwhile), or which of its new
	// limits the kernel refused in place ("limit KEY = VALUE refused by
	// the kernel: ERROR"; the others are applied, the refused one is tried
	// again at each reconcile); empty otherwise.
	UpdateBlocked string `json:"update_blocked,omitempty"`
	PID           int    `json:"pid,omitempty"`
	// FencingToken is the fencing token of the job's current or last run
	// (BERTH_FENCING_TOKEN, docs/fencing.md): greater than every earlier
	// run's of the job, on any agent; absent before the first run and for
	// a run an earlier release started.
	FencingToken uint64     `json:"fencing_token,omitempty"`
	Cgroup       string     `json:"cgroup"` // as /proc/PID/cgroup names it
	StartedAt    *time.Time `json:"started_at,omitempty"`
	Restarts     int        `json:"restarts"`
	// NextRestart is when a job in state backoff starts again.
	NextRestart *time.Time    `json:"next_restart,omitempty"`
	LastExit    *worker.Exit  `json:"last_exit,omitempty"`
	Limits      limits.Limits `json:"limits"`
	Usage       *Usage        `json:"usage,omitempty"`
	Command     []string      `json:"command"`
}

// Usage is a job's cgroup accounting at the time of the request. The
// counters (CPUSeconds, OOMKills, IO*, Pressure) never go down while the
// job's cgroup exists; a client computes rates from two answers.
type Usage struct {
	// GroupUsage holds the cgroup's accounting and limits, as a sharing
	// group's; its fields are Usage's own in JSON.
	GroupUsage
	// Pressure is the job's pressure stall information; nil when the
	// kernel keeps none for it (no cgroup2 hierarchy, PSI disabled).
	Pressure *Pressure `json:"pressure,omitempty"`
}

// Pressure is a job's pressure stall information (PSI): per resource, the
// total time its tasks were stalled, from the cgroup's cpu.pressure,
// memory.pressure and io.pressure (Documentation/accounting/psi.rst).
type Pressure struct {
	CPU    Stall `json:"cpu"`
	Memory Stall `json:"memory"`
	IO     Stall `json:"io"`
}

// Stall is one resource's pressure totals, in seconds.
type Stall struct {
	// SomeSeconds is the time at least one task waited on the resource
	// ("some" total).
	SomeSeconds float64 `json:"some_seconds"`
	// FullSeconds is the time every non-idle task waited at once ("full"
	// total); nil when the kernel reports no "full" line (cpu.pressure
	// before Linux 5.13).
	FullSeconds *float64 `json:"full_seconds,omitempty"`
}

// Agent is GET /v1/agent: this agent as a cluster member, and its
// configuration file.
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
	// PID is the agent's process ID: `berth reload` signals it after
	// checking that it is the PID in the agent's lock file.
	PID int `json:"pid"`
	// Version is the agent's release (berth version).
	Version string `json:"version,omitempty"`
	// ImageStarted is when this agent's program started (RFC 3339): it
	// changes on every start and every hand-over (SIGUSR2, berth
	// upgrade), which keeps the pid.
	ImageStarted time.Time `json:"image_started,omitzero"`
	// Adoption says what this agent took over from an earlier one at its
	// start (live restart, docs/live-restart.md), after its first
	// reconcile; absent when it found nothing to adopt, unless a
	// hand-over (berth upgrade) started it.
	Adoption *Adoption `json:"adoption,omitempty"`
	// HandOverRefused is the last hand-over this image refused (SIGUSR2,
	// berth upgrade), with why; absent when it refused none. berth
	// upgrade reads it to answer at once rather than wait its --timeout.
	HandOverRefused *HandOverRefusal `json:"hand_over_refused,omitempty"`
	// Config is the configuration file in force and how the last reload
	// went.
	Config AgentConfig `json:"config"`
}

// Adoption is what an agent took over from an earlier one at its start.
type Adoption struct {
	// At is when the agent listed the runs the lease guard held.
	At time.Time `json:"at"`
	// Held is how many runs the lease guard held for an earlier agent.
	Held int `json:"held"`
	// Adopted is how many of them workers of this agent took over, with
	// their process, pid and start time (the rest were killed: a failed
	// identity check, a changed command, or a job no longer assigned).
	Adopted int `json:"adopted"`
}

// HandOverRefusal is a hand-over an agent refused: it goes on as before.
type HandOverRefusal struct {
	// At is when it refused.
	At time.Time `json:"at"`
	// Reason says why (the new program does not run, refuses the
	// configuration file, the renewal before the exec failed...).
	Reason string `json:"reason"`
}

// AgentConfig is the agent's configuration file as GET /v1/agent reports
// it.
type AgentConfig struct {
	// File is the path the agent reads (and re-reads on SIGHUP).
	File string `json:"file"`
	// SHA256 is the hex SHA-256 of the file's bytes in force: compare with
	// `sha256sum FILE` to tell whether an edit is in force yet.
	SHA256 string `json:"sha256"`
	// LoadedAt is when that version was put in force (start or reload).
	LoadedAt time.Time `json:"loaded_at"`
	// Reloads counts the reloads tried since the agent started (SIGHUP);
	// `berth reload` waits for it to grow.
	Reloads uint64 `json:"reloads"`
	// LastReload is the last reload's result; absent before the first.
	LastReload *Reload `json:"last_reload,omitempty"`
}

// Reload is the result of one reload of the configuration file.
type Reload struct {
	// Seq numbers the reload: 1 for the first since the agent started.
	Seq uint64 `json:"seq"`
	// At is when the reload ended.
	At time.Time `json:"at"`
	// Successful says whether the file was put in force; a refused reload
	// changes nothing.
	Successful bool `json:"successful"`
	// Error says why it was refused ("FILE:LINE:COL: key: message" lines,
	// or the store's refusal).
	Error string `json:"error,omitempty"`
	// SHA256 is the hex SHA-256 of the file this reload read.
	SHA256 string `json:"sha256"`
	// Changes lists every setting the reload changed, "key: old → new"
	// (bytes, cores, durations), as the agent's log has them.
	Changes []string `json:"changes"`
	// Warnings are the file's warnings ("FILE:LINE:COL: key: message").
	Warnings []string `json:"warnings,omitempty"`
}

// Group is one sharing group as GET /v1/groups returns it: the parent
// cgroup of its jobs on this agent, whose limits cap their sum.
type Group struct {
	Name   string        `json:"name"`
	Cgroup string        `json:"cgroup"` // as /proc/PID/cgroup names it
	Limits limits.Limits `json:"limits"`
	// Jobs are the IDs of the group's jobs on this agent, sorted.
	Jobs  []string    `json:"jobs"`
	Usage *GroupUsage `json:"usage,omitempty"`
}

// GroupUsage is a sharing group's cgroup accounting (its jobs together) at
// the time of the request.
type GroupUsage struct {
	CPUSeconds       float64 `json:"cpu_seconds"`        // user + system, seconds
	CPULimitCores    float64 `json:"cpu_limit_cores"`    // quota/period; 0: unlimited
	MemoryBytes      uint64  `json:"memory_bytes"`       // charged to the cgroup, bytes
	MemoryLimitBytes uint64  `json:"memory_limit_bytes"` // 0: unlimited
	OOMKills         uint64  `json:"oom_kills"`
	Pids             uint64  `json:"pids"`
	PidsLimit        uint64  `json:"pids_limit"` // pids.max; 0: unlimited
	// IOReadBytes and IOWriteBytes are bytes read from and written to
	// block devices, summed over devices (v2 io.stat rbytes/wbytes; v1
	// blkio.throttle.io_service_bytes_recursive).
	IOReadBytes  uint64 `json:"io_read_bytes"`
	IOWriteBytes uint64 `json:"io_write_bytes"`
}

// Member is one live member in GET /v1/members.
type Member struct {
	ID         string    `json:"id"`
	Protocol   string    `json:"protocol"`   // static or balanced (KIP-987)
	Connectors []string  `json:"connectors"` // declared static.connectors
	Tasks      []string  `json:"tasks"`      // declared static.tasks
	Addr       string    `json:"addr"`       // the agent's API address, host:port (https://host:port with TLS)
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

// ServerInfo is GET / in Kafka Connect's shape: the agent's version and
// commit; kafka_cluster_id carries the berth cluster's name (there is no
// Kafka cluster).
type ServerInfo struct {
	Version        string `json:"version"`
	Commit         string `json:"commit"`
	KafkaClusterID string `json:"kafka_cluster_id"`
}

// WorkerStatus is GET /health in Kafka Connect's shape (KIP-1017): Status
// is HealthHealthy, HealthStarting or HealthUnhealthy, Message Connect's
// sentence for it.
type WorkerStatus struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// The statuses of a WorkerStatus, and the message Connect gives each
// (WorkerStatus.healthy, starting and unhealthy in Kafka Connect's REST
// entities).
const (
	HealthHealthy   = "healthy"
	HealthStarting  = "starting"
	HealthUnhealthy = "unhealthy"

	healthyMessage   = "Worker has completed startup and is ready to handle requests."
	startingMessage  = "Worker is still starting up."
	unhealthyMessage = "Worker was unable to handle this request and may be unable to handle other requests."
)

// ConnectorInfo is GET /connectors/{name} in Kafka Connect's shape: the
// config flattened into Connect-style dotted string keys ("tasks.max",
// "task.command", "task.limits.memory"; list values JSON-encoded). Every
// "<process>.env.<NAME>" value is Hidden; "<process>.env_file" is the
// path of the file, never its values.
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

// TaskInfo is one entry of GET /connectors/{name}/tasks in Kafka Connect's
// shape: the task's ID and its configuration (the task's own job, its
// command expanded, flattened as ConnectorInfo's config is).
type TaskInfo struct {
	ID     TaskRef           `json:"id"`
	Config map[string]string `json:"config"`
}

// ConnectorExpanded is one value of GET /connectors?expand=status and/or
// expand=info (Kafka Connect's shape): the connector's info, its status,
// or both.
type ConnectorExpanded struct {
	Info   *ConnectorInfo   `json:"info,omitempty"`
	Status *ConnectorStatus `json:"status,omitempty"`
}

// ConnectorStatus is GET /connectors/{name}/status in Kafka Connect's
// shape: the state of the connector and of each task, with the agent that
// runs it as worker_id. A connector with its own job ([connector.run]) has
// that job's state; one without has its target state (RUNNING, PAUSED,
// STOPPED) with the cluster's leader as worker_id, since Connect always
// reports a connector. A stopped connector has no tasks (KIP-875).
type ConnectorStatus struct {
	Name      string       `json:"name"`
	Connector JobStatus    `json:"connector"`
	Tasks     []TaskStatus `json:"tasks"`
	Type      string       `json:"type"`
}

// JobStatus is the state of one job in Connect's words (ConnectState:
// UNASSIGNED, RUNNING, PAUSED, STOPPED, RESTARTING, FAILED).
type JobStatus struct {
	State    string `json:"state"`
	WorkerID string `json:"worker_id"`
	Trace    string `json:"trace,omitempty"`
	// FencingToken is the job's fencing token (Job.FencingToken), a field
	// of berth's beside Connect's own: Connect's clients read the state
	// by name and skip a field they do not know, as they skip "version",
	// which Connect itself added to this shape (KIP-891).
	FencingToken uint64 `json:"fencing_token,omitempty"`
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
