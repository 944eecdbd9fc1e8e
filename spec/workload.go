package spec

import (
	"time"

	"github.com/berthd/berth/limits"
)

// Workload is a set of sharing groups and connectors: the [[group]] and
// [[connector]] blocks of an agent file or of a connector file, or the
// definitions kept in the cluster store.
type Workload struct {
	Groups     []Group
	Connectors []Connector
}

// Group is a [[group]]: a sharing group whose limits cap the sum of its
// jobs on one host (FLINK-3315's named slot-sharing group).
type Group struct {
	Name   string
	Limits limits.Limits
}

// Connector is a [[connector]].
type Connector struct {
	// Name is the connector's name and the job ID of its own job.
	Name string
	// Tasks is the number of task jobs, <Name>-0 .. <Name>-<Tasks-1>.
	Tasks int
	// Group names a [[group]], or "".
	Group string
	// Run is the connector's own job ([connector.run]); nil when absent.
	Run *Process
	// Task is the template of each task job ([connector.task]); nil when
	// absent, which is allowed only when Tasks is 0.
	Task *Process
}

// Process is how a job's worker is run: [connector.run] or [connector.task].
type Process struct {
	// Command is argv; Command[0] is an absolute path or a name resolved
	// through PATH when the worker starts. In a Connector it holds the
	// unexpanded ${...} references; in a Job they are expanded.
	Command []string
	// Env is extra environment (name -> value) for the worker.
	Env map[string]string
	// EnvFile is the absolute path of a file of KEY=VALUE lines (host.ReadEnvFile)
	// read on the host that runs the job, whose values are added to Env
	// and override it, as systemd's EnvironmentFile= overrides
	// Environment=; "" for none. The definition holds the path only.
	EnvFile string
	// User is "" (the agent's user), "user" or "user:group", names or
	// numeric IDs, resolved when the worker starts.
	User string
	// Dir is the absolute working directory (working_directory, or its
	// older name dir), or "" for "/".
	Dir string
	// Restart is the restart policy (default DefaultRestart).
	Restart Restart
	// StopTimeout overrides [agent] stop_timeout when non-zero; in a Job it
	// holds the effective value.
	StopTimeout time.Duration
	// KillMode overrides [agent] kill_mode when not ""; in a Job it holds
	// the effective value.
	KillMode KillMode
	// KillSignal overrides [agent] kill_signal when not ""; in a Job it
	// holds the effective value.
	KillSignal Signal
	// MemoryPressure is the memory pressure action and its rule
	// (memory_pressure, memory_pressure_limit, memory_pressure_duration);
	// the zero value is none.
	MemoryPressure PressureRule
	// Limits are the job's resource limits.
	Limits limits.Limits
}
