package limits

import "time"

// Defaults of the agent file (see the package documentation of the file
// shape in DESIGN.md).
const (
	DefaultDataDir        = "/var/lib/berth"
	DefaultLogDir         = "/var/log/berth"
	DefaultLogMaxSize     = 10 << 20 // bytes
	DefaultLogMaxFiles    = 5
	DefaultListen         = "127.0.0.1:9750"
	DefaultCgroupRoot     = "berth"
	DefaultStopTimeout    = 10 * time.Second
	DefaultClusterName    = "berth"
	DefaultSessionTTL     = 10 * time.Second
	MinSessionTTL         = 2 * time.Second
	DefaultCPUPeriod      = 100 * time.Millisecond // CFS period, Documentation/scheduler/sched-bwc.rst
	MinMemory             = 1 << 20                // bytes
	maxNameLen            = 128
	minCPUQuotaMicros     = 1000 // sched-bwc.rst: "The minimum quota allowed for the quota or period is 1ms"
	minCPUPeriod          = time.Millisecond
	maxCPUPeriod          = time.Second
	minWeight, maxWeight  = 1, 10000 // cpu.weight, io.weight: Documentation/admin-guide/cgroup-v2.rst
	defaultRestartSetting = RestartOnFailure
)

// Config is a parsed and validated agent file.
type Config struct {
	// File is the name the configuration was read from.
	File    string
	Agent   Agent
	Static  Static
	Cluster Cluster
	// Workload holds the [[group]] and [[connector]] blocks of the file.
	Workload
}

// Agent is the [agent] table.
type Agent struct {
	// ID names this agent in the cluster; default os.Hostname().
	ID string
	// DataDir holds the agent's state (embedded etcd); absolute path.
	DataDir string
	// LogDir holds per-job logs <LogDir>/<job_id>.log; absolute path.
	LogDir string
	// LogMaxSize is the size in bytes at which a job log is rotated.
	LogMaxSize int64
	// LogMaxFiles is how many rotated job logs are kept (>= 1).
	LogMaxFiles int
	// LogSink is where job output goes: "file" or "journal".
	LogSink string
	// Listen is the host:port of the metrics and JSON API listener.
	Listen string
	// CgroupRoot is the agent's cgroup relative to each hierarchy root;
	// "" means the cgroup systemd delegated to the agent.
	CgroupRoot string
	// StopTimeout is the grace between SIGTERM and killing a job's cgroup,
	// used when the job's process does not set its own.
	StopTimeout time.Duration
}

// Static is the [static] table: the jobs this agent declares it will run
// (KIP-987 static.connectors / static.tasks). Names of connectors that do
// not exist are allowed (DESIGN rule 3).
type Static struct {
	Connectors []string
	Tasks      []string
}

// Protocol is the assignment protocol an agent speaks.
type Protocol string

// Protocols (DESIGN "The assignment function").
const (
	ProtocolStatic   Protocol = "static"
	ProtocolBalanced Protocol = "balanced"
)

// Cluster is the [cluster] table.
type Cluster struct {
	// Name of the cluster; default "berth".
	Name string
	// Endpoints of the etcd cluster; empty runs an embedded etcd.
	Endpoints []string
	// SessionTTL is the etcd lease TTL (>= 2 s; default 10 s).
	SessionTTL time.Duration
	// RebalanceDelay is how long a departed member's jobs stay unassigned
	// (Connect's scheduled.rebalance.max.delay.ms); default 0.
	RebalanceDelay time.Duration
	// Protocol is "static" (default) or "balanced".
	Protocol Protocol
	// TLS for the etcd client; zero when not configured.
	TLS TLS
}

// TLS names the PEM files of the etcd client's TLS configuration.
type TLS struct {
	CA, Cert, Key string
}

// Workload is a set of sharing groups and connectors: the [[group]] and
// [[connector]] blocks of an agent file or of a connector file.
type Workload struct {
	Groups     []Group
	Connectors []Connector
}

// Group is a [[group]]: a sharing group whose limits cap the sum of its
// jobs on one host (cgroup <root>/jobs/g-<Name>).
type Group struct {
	Name   string
	Limits Limits
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

// Restart is a job's restart policy.
type Restart string

// Restart policies.
const (
	RestartAlways    Restart = "always"
	RestartOnFailure Restart = "on-failure"
	RestartNever     Restart = "never"
)

// Process is how a job's worker is run: [connector.run] or [connector.task].
type Process struct {
	// Command is argv; Command[0] is an absolute path or a name resolved
	// through PATH when the worker starts. In a Connector it holds the
	// unexpanded ${...} references; in a Job they are expanded.
	Command []string
	// Env is extra environment (name -> value) for the worker.
	Env map[string]string
	// User is "" (the agent's user), "user" or "user:group", names or
	// numeric IDs, resolved when the worker starts.
	User string
	// Dir is the absolute working directory, or "" for "/".
	Dir string
	// Restart is the restart policy (default on-failure).
	Restart Restart
	// StopTimeout overrides [agent] stop_timeout when non-zero; in a Job it
	// holds the effective value.
	StopTimeout time.Duration
	// Limits are the job's resource limits.
	Limits Limits
}

// Limits are the resource limits of a job or a sharing group. A zero field
// is unset (no limit written).
type Limits struct {
	// CPU is the CPU bandwidth limit in cores (quota/period).
	CPU float64 `json:"cpu,omitempty"`
	// CPUPeriod is the CFS period; 0 means 100 ms. (JSON: nanoseconds.)
	CPUPeriod time.Duration `json:"cpu_period_ns,omitempty"`
	// CPUWeight is the cgroup v2 cpu.weight, 1..10000.
	CPUWeight uint64 `json:"cpu_weight,omitempty"`
	// Cpuset is the list of allowed CPUs in cpuset list syntax, "0-3,6".
	Cpuset string `json:"cpuset,omitempty"`
	// Memory is the hard memory limit in bytes (v2 memory.max, v1
	// memory.limit_in_bytes).
	Memory int64 `json:"memory,omitempty"`
	// MemoryHigh is the v2 memory.high throttle limit in bytes.
	MemoryHigh int64 `json:"memory_high,omitempty"`
	// MemorySwap is the swap allowed in addition to Memory, in bytes.
	MemorySwap int64 `json:"memory_swap,omitempty"`
	// Pids is the maximum number of processes and threads (pids.max).
	Pids int64 `json:"pids,omitempty"`
	// IOWeight is the cgroup v2 io.weight, 1..10000.
	IOWeight uint64 `json:"io_weight,omitempty"`
	// IO are per-device throttle limits.
	IO []IOLimit `json:"io,omitempty"`
}

// IOLimit throttles one block device. Zero rates are unset.
type IOLimit struct {
	// Device is a block device node or a path on a file system whose
	// backing disk is meant (see ResolveDevice).
	Device string `json:"device,omitempty"`
	// ReadBPS and WriteBPS are bytes per second.
	ReadBPS  int64 `json:"read_bps,omitempty"`
	WriteBPS int64 `json:"write_bps,omitempty"`
	// ReadIOPS and WriteIOPS are I/O operations per second.
	ReadIOPS  int64 `json:"read_iops,omitempty"`
	WriteIOPS int64 `json:"write_iops,omitempty"`
}
