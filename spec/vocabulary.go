package spec

import (
	"strconv"
	"time"
)

// Kind says whether a job is a connector's own job or one of its tasks.
type Kind string

// Job kinds, as used in metric labels (`kind`) and the API.
const (
	KindConnector Kind = "connector"
	KindTask      Kind = "task"
)

// TaskID is the job ID of task n of connector: "<connector>-<n>", as Kafka
// Connect names tasks (ConnectorTaskId).
func TaskID(connector string, n int) string {
	return connector + "-" + strconv.Itoa(n)
}

// Protocol is the assignment protocol an agent speaks (KIP-987: a worker
// with static.connectors / static.tasks speaks "static"; Connect's
// incremental cooperative protocol is "balanced" here).
type Protocol string

// Protocols (docs/design.md, "Assignment rules").
const (
	// ProtocolStatic gives every declared job to its declarer while every
	// member speaks static.
	ProtocolStatic Protocol = "static"
	// ProtocolBalanced makes the whole cluster place jobs by count,
	// sharing groups whole.
	ProtocolBalanced Protocol = "balanced"
)

// Restart is a job's restart policy, named as systemd's Restart= values
// (systemd.service(5)).
type Restart string

// Restart policies.
const (
	// RestartAlways restarts after every exit.
	RestartAlways Restart = "always"
	// RestartOnFailure restarts after a non-zero exit status or death by a
	// signal (systemd Restart=on-failure). The default.
	RestartOnFailure Restart = "on-failure"
	// RestartNever leaves the job exited after its first exit (systemd
	// Restart=no).
	RestartNever Restart = "never"
)

// TargetState is what an operator wants of a connector's jobs, as Kafka
// Connect's target state (KIP-52 pause and resume, KIP-875 stop): set by
// `berth pause|resume|stop` or the REST API, kept in the cluster store
// with the definition, and held by every agent that runs one of its jobs.
type TargetState string

// Target states.
const (
	// TargetRunning: the jobs run (Connect's STARTED). The default.
	TargetRunning TargetState = "running"
	// TargetPaused: every job's process is stopped and its cgroup removed;
	// the jobs stay assigned and show PAUSED.
	TargetPaused TargetState = "paused"
	// TargetStopped: as paused, and the connector shows STOPPED with no
	// tasks (KIP-875).
	TargetStopped TargetState = "stopped"
)

// DefKind is the kind of a stored workload definition: one [[connector]] or
// one [[group]] block.
type DefKind string

// Definition kinds, as the cluster store names its directories
// ("connectors/<name>", "groups/<name>") and validation problems name them.
const (
	DefConnector DefKind = "connector"
	DefGroup     DefKind = "group"
)

// Defaults and bounds of a job's definition (docs/config.md lists every
// key).
const (
	// DefaultStopTimeout is the grace between SIGTERM and killing a job's
	// cgroup, as `docker stop` uses by default.
	DefaultStopTimeout = 10 * time.Second
	// DefaultRestart is a process's restart policy when it sets none.
	DefaultRestart = RestartOnFailure
	// MaxNameLen is the longest connector, group or agent name and job ID,
	// bytes.
	MaxNameLen = 128
	// MaxTasks is the most tasks one connector may have.
	MaxTasks = 100000
)
