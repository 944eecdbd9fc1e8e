package config

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/spec"
)

// The reference of every key berth's files accept, declared once: the
// decoder reads its enumerations and integer bounds from it (and records
// which keys it reads, which the tests compare with it), docs/config.md and
// berth.toml(5) are generated from it, and the tests check that each
// documented default is what the decoder applies. The keys of a limits
// table are the table of limits (limits.Keys), which also checks and keeps
// their values.

// Type is the TOML type of a key as the reference names it.
type Type string

// Key types.
const (
	// TypeString is a TOML string.
	TypeString Type = "string"
	// TypeInteger is a TOML integer.
	TypeInteger Type = "integer"
	// TypeNumber is a TOML float or integer.
	TypeNumber Type = "number"
	// TypeDuration is a string in Go duration syntax ("10s", "1m30s",
	// "500ms"), never negative.
	TypeDuration Type = "duration"
	// TypeBytes is a byte size: a string with a unit ("512MiB"; KiB MiB GiB
	// TiB are powers of 1024, K M G T and kB MB GB TB powers of 1000) or an
	// integer number of bytes (limits.ParseBytes).
	TypeBytes Type = "byte size"
	// TypeStrings is an array of strings.
	TypeStrings Type = "array of strings"
	// TypeStringTable is a table whose keys are free names and whose values
	// are strings (env).
	TypeStringTable Type = "table of strings"
	// TypeTable is a table holding the keys of Key.Section.
	TypeTable Type = "table"
	// TypeTables is an array of tables, each holding the keys of
	// Key.Section.
	TypeTables Type = "array of tables"
)

// Range bounds an integer key, both ends included.
type Range struct {
	Min, Max int64
	// Source names where the bounds come from ("cgroup v2 weight"); ""
	// when they are berth's own.
	Source string
}

// String is "1 to 10000 (cgroup v2 weight)".
func (r Range) String() string {
	s := fmt.Sprintf("%d to %d", r.Min, r.Max)
	if r.Source != "" {
		s += " (" + r.Source + ")"
	}
	return s
}

// Key is one key of a Section.
type Key struct {
	// Name is the key as written in the file: "data_dir".
	Name string
	// Type is its TOML type.
	Type Type
	// Section is the ID of the Section a TypeTable or TypeTables key holds;
	// "" otherwise.
	Section string
	// Required is true when the table is incomplete without the key.
	Required bool
	// Default is the TOML value the decoder applies when the key is absent
	// (writing it changes nothing: a test checks that); "" when the key has
	// no such literal default (see DefaultNote).
	Default string
	// DefaultNote says what an absent key means when that is not a literal
	// value ("the host name", "unlimited"); "" when Default says it all.
	DefaultNote string
	// Unit is the unit of the value ("bytes", "cores", "bytes per second");
	// "" when it has none.
	Unit string
	// Range bounds an integer key; the decoder checks it. Nil: unbounded,
	// or bounded as Bounds says.
	Range *Range
	// Values lists the allowed values of a string enumeration; the decoder
	// checks them. Nil for any value.
	Values []string
	// Bounds says which values are accepted beyond Type, Range and Values
	// ("absolute path", "at least 2s, whole seconds").
	Bounds string
	// Example is a valid TOML value for the key (a test parses a file that
	// sets every key to its example); "" for TypeTable and TypeTables keys.
	Example string
	// Excludes names a key of the same table that may not be given with
	// this one (password and password_file); the example file sets the
	// other.
	Excludes string
	// Doc is the key's meaning in one line.
	Doc string
}

// Section is one table of berth's files.
type Section struct {
	// ID names the section: "agent", "cluster.tls", "connector",
	// "process", "limits", "limits.io"; "file" and "definitions" are the
	// top level of an agent file and of a connectors file.
	ID string
	// Headers are the TOML headers the section is written under
	// ("[agent]", "[connector.run]", "[[connector.task.limits.io]]"); none
	// for a top level.
	Headers []string
	// Doc is a paragraph on what the section is for.
	Doc string
	// Keys are the keys of the section, in the order the reference lists
	// them.
	Keys []Key
}

// Section IDs.
const (
	SectionFile        = "file"
	SectionDefinitions = "definitions"
	SectionAgent       = "agent"
	SectionStatic      = "static"
	SectionCluster     = "cluster"
	SectionClusterTLS  = "cluster.tls"
	SectionClient      = "agent.client"
	SectionClientTLS   = "agent.client.tls"
	SectionGroup       = "group"
	SectionConnector   = "connector"
	SectionProcess     = "process"
	SectionLimits      = "limits"
	SectionIO          = "limits.io"
)

// nameBounds is the rule for names and job IDs (validName).
var nameBounds = fmt.Sprintf("[A-Za-z0-9][A-Za-z0-9._-]*, at most %d bytes", spec.MaxNameLen)

// Log sinks (agent.log_sink).
const (
	// LogSinkFile writes job output to <log_dir>/<job_id>.log only.
	LogSinkFile = "file"
	// LogSinkJournal also sends every line to the journal with
	// BERTH_JOB_ID set.
	LogSinkJournal = "journal"
)

// killModes are kill_mode's values (systemd.kill(5) KillMode=).
var killModes = []string{string(spec.KillControlGroup), string(spec.KillMixed), string(spec.KillProcess)}

// killModeDoc says what each kill mode does.
const killModeDoc = "control-group: kill_signal to every process of the cgroup, stop_timeout of grace for all of them, then SIGKILL to what is left; " +
	"mixed: kill_signal to the main process, then SIGKILL to every process left once it has exited or the grace is over; " +
	"process: kill_signal to the main process only, the others left alone until they exit or the grace is over, then SIGKILL to what is left " +
	"(systemd.kill(5) KillMode=; unlike systemd's process, nothing outlives the stop)"

// signalBounds says how kill_signal may be written.
const signalBounds = `a name with or without SIG ("TERM")`

// tomlString is s as a TOML basic string literal.
func tomlString(s string) string { return strconv.Quote(s) }

// sections is the reference. Its order is the order of docs/config.md.
var sections = []Section{
	{
		ID: SectionFile,
		Doc: "The agent file, /etc/berth/berth.toml by default (--config). " +
			"Every table is optional; an empty file is a valid agent that runs the cluster's jobs on an embedded etcd.",
		Keys: []Key{
			{Name: "agent", Type: TypeTable, Section: SectionAgent, Doc: "this host's agent"},
			{Name: "static", Type: TypeTable, Section: SectionStatic, Doc: "the jobs this agent declares it runs (KIP-987)"},
			{Name: "cluster", Type: TypeTable, Section: SectionCluster, Doc: "cluster membership: the etcd store and the assignment protocol"},
			{Name: "group", Type: TypeTables, Section: SectionGroup, Doc: "sharing groups, as in a connectors file"},
			{Name: "connector", Type: TypeTables, Section: SectionConnector, Doc: "connectors, as in a connectors file"},
		},
	},
	{
		ID: SectionDefinitions,
		Doc: "A connectors file, the input of berth apply -f FILE: only [[group]] and [[connector]] blocks, " +
			"validated by the same rules as in the agent file. The cluster store keeps each block as its own definition, " +
			"its keys at the top level (name, tasks, [run], [task.limits] ...).",
		Keys: []Key{
			{Name: "group", Type: TypeTables, Section: SectionGroup, Doc: "sharing groups"},
			{Name: "connector", Type: TypeTables, Section: SectionConnector, Doc: "connectors"},
		},
	},
	{
		ID:      SectionAgent,
		Headers: []string{"[agent]"},
		Doc:     "This host's agent: its name in the cluster, where it keeps state and job logs, where it listens, and its cgroup.",
		Keys: []Key{
			{Name: "id", Type: TypeString, DefaultNote: "the host name", Bounds: nameBounds, Example: tomlString("host-a"),
				Doc: "this agent's member ID in the cluster"},
			{Name: "data_dir", Type: TypeString, Default: tomlString(DefaultDataDir), Bounds: "absolute path", Example: tomlString(DefaultDataDir),
				Doc: "the agent's state; holds the embedded etcd when [cluster] names no endpoints"},
			{Name: "log_dir", Type: TypeString, Default: tomlString(DefaultLogDir), Bounds: "absolute path", Example: tomlString(DefaultLogDir),
				Doc: "job output: <log_dir>/<job_id>.log, stdout and stderr with berth's own lines"},
			{Name: "log_max_size", Type: TypeBytes, Default: tomlString("10MiB"), Unit: "bytes", Bounds: "> 0; rounded up to whole MiB", Example: tomlString("10MiB"),
				Doc: "size at which a job's log is rotated"},
			{Name: "log_max_files", Type: TypeInteger, Default: strconv.Itoa(DefaultLogMaxFiles), Range: &Range{Min: 1, Max: 10000}, Example: "5",
				Doc: "rotated logs kept per job"},
			{Name: "log_sink", Type: TypeString, Default: tomlString(LogSinkFile), Values: []string{LogSinkFile, LogSinkJournal}, Example: tomlString(LogSinkFile),
				Doc: "file: job output to log_dir only; journal: also to the journal, one entry per line with BERTH_JOB_ID"},
			{Name: "listen", Type: TypeString, Default: tomlString(DefaultListen), Bounds: "host:port; port 0 to 65535, host empty, an IP address or a host name", Example: tomlString(DefaultListen),
				Doc: "address of /metrics, the JSON API and the status page"},
			{Name: "advertise", Type: TypeString, DefaultNote: "listen; a listen host of 0.0.0.0, :: or empty is replaced by this host's first up, non-loopback unicast address", Bounds: "host:port; a host that is an IP address other than 0.0.0.0 and ::, or a host name; port 1 to 65535", Example: tomlString("10.0.0.7:9750"),
				Doc: "the address other members reach this agent's API at (published in its member record; etcd's --advertise-client-urls): set it when listen binds every address, or behind NAT; read when the agent starts"},
			{Name: "cgroup_root", Type: TypeString, Default: tomlString(DefaultCgroupRoot), Bounds: `"" or a relative cgroup path of names`, Example: tomlString(DefaultCgroupRoot),
				Doc: `the agent's cgroup below each hierarchy root; "" is the cgroup systemd delegated to berth.service`},
			{Name: "stop_timeout", Type: TypeDuration, Default: tomlString(spec.DefaultStopTimeout.String()), Bounds: ">= 0", Example: tomlString("10s"),
				Doc: "grace between the stop signal and killing a job's whole cgroup, unless the job sets its own"},
			{Name: "kill_mode", Type: TypeString, Default: tomlString(string(spec.DefaultKillMode)), Values: killModes, Example: tomlString(string(spec.KillControlGroup)),
				Doc: "which processes of a job a stop signals, unless the job sets its own: " + killModeDoc},
			{Name: "kill_signal", Type: TypeString, Default: tomlString(string(spec.DefaultKillSignal)), Values: spec.StopSignalNames(), Bounds: signalBounds, Example: tomlString("SIGTERM"),
				Doc: "the signal a stop sends first, unless the job sets its own (systemd's KillSignal=)"},
			{Name: "web_config_file", Type: TypeString, DefaultNote: "plain HTTP, no authentication", Bounds: "absolute path; checked when the agent starts (berth validate too)", Example: tomlString("/etc/berth/web.yml"),
				Doc: "TLS, client certificates and basic auth on listen: a Prometheus exporter-toolkit web configuration file (node_exporter's --web.config.file)"},
			{Name: "allowed_hosts", Type: TypeStrings, Default: "[]", Bounds: `"*", or host names, each optionally with :port (ignored)`, Example: `["berth-a.example.net"]`,
				Doc: "host names a plain-HTTP request may name in its Host header besides IP addresses, localhost, this host's name and listen's host; " +
					"other names get 421 (a DNS-rebinding web page's request; etcd's --host-whitelist); \"*\" allows every name; read when the agent starts"},
			{Name: "client", Type: TypeTable, Section: SectionClient, Doc: "what berth's own requests to agents' APIs present"},
		},
	},
	{
		ID:      SectionClient,
		Headers: []string{"[agent.client]"},
		Doc: "What berth's own requests to an agent's API present: berth status, reload, top and completion (to the agent of --config) " +
			"and an agent's Connect status view (to its peers). They use https when web_config_file turns TLS on; " +
			"give the CA, a client certificate and basic-auth credentials that web configuration accepts.",
		Keys: []Key{
			{Name: "tls", Type: TypeTable, Section: SectionClientTLS, Doc: "TLS trust and client certificate"},
			{Name: "username", Type: TypeString, DefaultNote: "no basic auth", Bounds: "not empty; needs password or password_file", Example: tomlString("berth"),
				Doc: "basic-auth user (one of the web configuration's basic_auth_users)"},
			{Name: "password", Type: TypeString, DefaultNote: "none", Bounds: "needs username; exclusive with password_file", Example: tomlString("s3cret"), Excludes: "password_file",
				Doc: "basic-auth password, in this file (prefer password_file)"},
			{Name: "password_file", Type: TypeString, DefaultNote: "none", Bounds: "absolute path; needs username; only root may read or write it", Example: tomlString("/etc/berth/api-password"),
				Doc: "file holding the basic-auth password (one line)"},
		},
	},
	{
		ID:      SectionClientTLS,
		Headers: []string{"[agent.client.tls]"},
		Doc:     "PEM files of berth's own API requests; none set: the system's roots and no client certificate.",
		Keys: []Key{
			{Name: "ca", Type: TypeString, DefaultNote: "the system's roots", Bounds: "absolute path", Example: tomlString("/etc/berth/tls/ca.pem"),
				Doc: "CA bundle that signs the agents' server certificates"},
			{Name: "cert", Type: TypeString, DefaultNote: "no client certificate", Bounds: "absolute path; with key", Example: tomlString("/etc/berth/tls/client.pem"),
				Doc: "client certificate, for agents whose client_auth_type asks for one"},
			{Name: "key", Type: TypeString, DefaultNote: "no client certificate", Bounds: "absolute path; with cert", Example: tomlString("/etc/berth/tls/client-key.pem"),
				Doc: "client certificate's private key"},
			{Name: "server_name", Type: TypeString, DefaultNote: "the host of the address dialled", Bounds: "a name the agents' certificates carry", Example: tomlString("host-a"),
				Doc: "name the agents' certificates are checked against"},
		},
	},
	{
		ID:      SectionStatic,
		Headers: []string{"[static]"},
		Doc: "The jobs this agent declares it runs, as a Kafka Connect worker's static.connectors and static.tasks (KIP-987). " +
			"A declared job runs here while every member speaks the static protocol; names of connectors that do not exist yet are allowed. " +
			"Both empty: this agent is a standby.",
		Keys: []Key{
			{Name: "connectors", Type: TypeStrings, Default: "[]", Bounds: "names; each at most once", Example: `["orders-sink"]`,
				Doc: "connector jobs declared here (a connector's own [connector.run] job)"},
			{Name: "tasks", Type: TypeStrings, Default: "[]", Bounds: "task IDs <connector>-<n>, n < tasks of a known connector; each at most once", Example: `["orders-sink-0", "orders-sink-1"]`,
				Doc: "task jobs declared here"},
		},
	},
	{
		ID:      SectionCluster,
		Headers: []string{"[cluster]"},
		Doc:     "Cluster membership: every agent of a cluster holds a lease (session) in one etcd, and a job runs only on the member the published assignment gives it.",
		Keys: []Key{
			{Name: "name", Type: TypeString, Default: tomlString(DefaultClusterName), Bounds: nameBounds, Example: tomlString("prod"),
				Doc: "the cluster's name: its keys in etcd live under /berth/<name>/"},
			{Name: "endpoints", Type: TypeStrings, Default: "[]", Bounds: "etcd client URLs, none empty", Example: `["https://etcd-1.example:2379"]`,
				Doc: "etcd endpoints; none: a single-node embedded etcd on loopback under data_dir"},
			{Name: "session_ttl", Type: TypeDuration, Default: tomlString(DefaultSessionTTL.String()), Bounds: "at least " + MinSessionTTL.String() + ", whole seconds", Example: tomlString("10s"),
				Doc: "TTL of the agent's etcd lease: a member whose lease expires is fenced and its jobs killed"},
			{Name: "rebalance_delay", Type: TypeDuration, Default: tomlString("0s"), Bounds: ">= 0", Example: tomlString("30s"),
				Doc: "how long a departed member's jobs stay unassigned (Connect's scheduled.rebalance.max.delay.ms)"},
			{Name: "protocol", Type: TypeString, Default: tomlString(string(spec.ProtocolStatic)), Values: []string{string(spec.ProtocolStatic), string(spec.ProtocolBalanced)}, Example: tomlString(string(spec.ProtocolStatic)),
				Doc: "static: declared jobs run on their declarer (KIP-987); balanced: jobs placed by count, groups whole"},
			{Name: "tls", Type: TypeTable, Section: SectionClusterTLS, Doc: "TLS of the etcd client"},
			{Name: "username", Type: TypeString, DefaultNote: "no user; with etcd's --client-cert-auth, the client certificate's common name", Bounds: "not empty; needs endpoints and password or password_file", Example: tomlString("berth-prod"),
				Doc: "etcd user; its role needs read and write on /berth/<name>/ only"},
			{Name: "password", Type: TypeString, DefaultNote: "none", Bounds: "needs username; exclusive with password_file", Example: tomlString("s3cret"), Excludes: "password_file",
				Doc: "the etcd user's password, in this file (prefer password_file)"},
			{Name: "password_file", Type: TypeString, DefaultNote: "none", Bounds: "absolute path; needs username; only root may read or write it", Example: tomlString("/etc/berth/etcd-password"),
				Doc: "file holding the etcd user's password (one line), read when the agent connects"},
		},
	},
	{
		ID:      SectionClusterTLS,
		Headers: []string{"[cluster.tls]"},
		Doc:     "PEM files of the etcd client's TLS configuration; none set: plain connections.",
		Keys: []Key{
			{Name: "ca", Type: TypeString, DefaultNote: "the system's roots", Bounds: "absolute path", Example: tomlString("/etc/berth/etcd-ca.pem"),
				Doc: "CA bundle that signs the etcd servers' certificates"},
			{Name: "cert", Type: TypeString, DefaultNote: "no client certificate", Bounds: "absolute path; with key", Example: tomlString("/etc/berth/etcd.pem"),
				Doc: "client certificate (etcd's --client-cert-auth)"},
			{Name: "key", Type: TypeString, DefaultNote: "no client certificate", Bounds: "absolute path; with cert", Example: tomlString("/etc/berth/etcd-key.pem"),
				Doc: "client certificate's private key"},
			{Name: "server_name", Type: TypeString, DefaultNote: "the host of the endpoint", Bounds: "a name the servers' certificates carry", Example: tomlString("etcd.example"),
				Doc: "name the etcd servers' certificates are checked against"},
		},
	},
	{
		ID:      SectionGroup,
		Headers: []string{"[[group]]"},
		Doc: "A sharing group (Flink's named slot-sharing group): its limits cap the sum of its jobs on one host, " +
			"each job's own limits still apply inside it, and the balanced protocol places a group's jobs together.",
		Keys: []Key{
			{Name: "name", Type: TypeString, Required: true, Bounds: nameBounds + "; unique", Example: tomlString("sinks"),
				Doc: "the group's name, as connectors name it"},
			{Name: "limits", Type: TypeTable, Section: SectionLimits, Doc: "limits on the sum of the group's jobs"},
		},
	},
	{
		ID:      SectionConnector,
		Headers: []string{"[[connector]]"},
		Doc: "A connector: its own job (job ID: the connector's name) when it has [connector.run], and tasks jobs " +
			"<name>-0 ... <name>-<tasks-1> run from [connector.task], as Kafka Connect names tasks.",
		Keys: []Key{
			{Name: "name", Type: TypeString, Required: true, Bounds: nameBounds + "; unique; task IDs too", Example: tomlString("orders-sink"),
				Doc: "the connector's name and its own job's ID"},
			{Name: "tasks", Type: TypeInteger, Default: "0", Range: &Range{Min: 0, Max: spec.MaxTasks}, Example: "2",
				Doc: "number of task jobs"},
			{Name: "group", Type: TypeString, DefaultNote: "no group", Bounds: "a [[group]] name", Example: tomlString("sinks"),
				Doc: "the sharing group of all the connector's jobs"},
			{Name: "run", Type: TypeTable, Section: SectionProcess, Doc: "the connector's own job; none when absent"},
			{Name: "task", Type: TypeTable, Section: SectionProcess, Doc: "the template of every task job; required when tasks > 0"},
		},
	},
	{
		ID:      SectionProcess,
		Headers: []string{"[connector.run]", "[connector.task]"},
		Doc: "How a job's worker process is run. Every worker gets BERTH_JOB_ID, BERTH_CONNECTOR, BERTH_TASK " +
			"(the task index, empty for a connector job), BERTH_CGROUP, and for each run BERTH_FENCING_TOKEN and " +
			"BERTH_CLAIM_FILE (docs/fencing.md) in its environment.",
		Keys: []Key{
			{Name: "command", Type: TypeStrings, Required: true, Bounds: "not empty; ${BERTH_JOB_ID}, ${BERTH_CONNECTOR}, ${BERTH_TASK} expanded, $$ is $",
				Example: `["/opt/sink/bin/sink", "--task=${BERTH_TASK}"]`,
				Doc:     "argv; a program without a slash is looked up in PATH when the worker starts"},
			{Name: "env", Type: TypeStringTable, DefaultNote: "none", Bounds: "names without = or NUL; not BERTH_*", Example: `{ SINK_URL = "http://127.0.0.1:8080" }`,
				Doc: "extra environment of the worker; the API shows every value as [hidden]"},
			{Name: "env_file", Type: TypeString, DefaultNote: "none", Bounds: "absolute path; on the host that runs the job, owned by root, no access for group and others",
				Example: tomlString("/etc/berth/orders-sink.env"),
				Doc:     "KEY=VALUE lines added to env, over it, read on the job's host at start and at every reload (the store keeps the path only)"},
			{Name: "user", Type: TypeString, DefaultNote: "the agent's user", Bounds: `"user" or "user:group", names or numeric IDs`, Example: tomlString("nobody"),
				Doc: "user (and group) the worker runs as"},
			{Name: "working_directory", Type: TypeString, DefaultNote: "/", Bounds: "absolute path", Example: tomlString("/"),
				Doc: "working directory (systemd's WorkingDirectory=)"},
			{Name: "dir", Type: TypeString, DefaultNote: "/", Bounds: "absolute path; not with working_directory", Example: tomlString("/"), Excludes: "working_directory",
				Doc: "the older name of working_directory, still read"},
			{Name: "restart", Type: TypeString, Default: tomlString(string(spec.DefaultRestart)), Values: []string{string(spec.RestartAlways), string(spec.RestartOnFailure), string(spec.RestartNever)}, Example: tomlString(string(spec.RestartOnFailure)),
				Doc: "when an exited worker is started again, with backoff (systemd's Restart=; never is Restart=no)"},
			{Name: "memory_pressure", Type: TypeString, Default: tomlString(string(spec.PressureNone)), Values: spec.MemoryPressures(), Example: tomlString(string(spec.PressureRestart)),
				Doc: "what the agent does when the job's memory comes under pressure, before the kernel's OOM killer: " +
					"none: nothing; notify: the job gets $MEMORY_PRESSURE_WATCH and $MEMORY_PRESSURE_WRITE (systemd.io/MEMORY_PRESSURE) for its own cgroup's memory.pressure and sheds caches itself; " +
					"restart: a graceful stop (kill_signal, then stop_timeout), then the restart policy, the exit saying memory pressure. " +
					"cgroup v2: a PSI trigger, the stall share at least memory_pressure_limit for memory_pressure_duration; " +
					"cgroup v1 memory (legacy and hybrid hosts): restart fires when the usage crosses limits.memory_high (required there; on v2 memory_high or memory is)"},
			{Name: "memory_pressure_limit", Type: TypeNumber, Default: strconv.FormatFloat(spec.DefaultPressureLimit, 'f', -1, 64), Unit: "percent", Bounds: "> 0, <= 100", Example: "20",
				Doc: "share of wall time at least one of the job's tasks stalls on memory (PSI some, as systemd-oomd's ManagedOOMMemoryPressureLimit=) that counts as pressure (cgroup v2; v1 memory uses memory_high)"},
			{Name: "memory_pressure_duration", Type: TypeDuration, Default: tomlString(spec.DefaultPressureDuration.String()), Bounds: ">= " + spec.MinPressureDuration.String() + " (the kernel's shortest PSI window), <= " + spec.MaxPressureDuration.String(), Example: tomlString("5s"),
				Doc: "how long memory_pressure_limit must hold (systemd-oomd's ManagedOOMMemoryPressureDurationSec=); notify rounds it to a PSI window of 2 s to 10 s"},
			{Name: "stop_timeout", Type: TypeDuration, DefaultNote: "[agent] stop_timeout", Bounds: ">= 0", Example: tomlString("10s"),
				Doc: "grace between the stop signal and killing the job's whole cgroup"},
			{Name: "kill_mode", Type: TypeString, DefaultNote: "[agent] kill_mode", Values: killModes, Example: tomlString(string(spec.KillMixed)),
				Doc: "which processes of the job a stop signals: " + killModeDoc},
			{Name: "kill_signal", Type: TypeString, DefaultNote: "[agent] kill_signal", Values: spec.StopSignalNames(), Bounds: signalBounds, Example: tomlString("SIGINT"),
				Doc: "the signal a stop sends first (systemd's KillSignal=)"},
			{Name: "limits", Type: TypeTable, Section: SectionLimits, Doc: "the job's resource limits"},
		},
	},
	{
		ID:      SectionLimits,
		Headers: []string{"[connector.run.limits]", "[connector.task.limits]", "[group.limits]"},
		Doc: "Resource limits of a job's (or a sharing group's) cgroup, on cgroup v1 and v2. " +
			"Every key is optional; an absent key leaves the resource unlimited. Often written inline: limits = { cpu = 1.5, memory = \"512MiB\" }.",
		Keys: limitKeys(),
	},
	{
		ID:      SectionIO,
		Headers: []string{"[[connector.run.limits.io]]", "[[connector.task.limits.io]]", "[[group.limits.io]]"},
		Doc: "One device's throttle (v2 io.max; v1 blkio.throttle.*). Often written inline: " +
			"io = [{ device = \"/\", write_bps = \"20MiB\" }]. cgroup v1 throttles only direct and synchronous writes.",
		Keys: []Key{
			{Name: "device", Type: TypeString, Required: true, Bounds: "a block device node or a path on a disk-backed file system", Example: tomlString("/"),
				Doc: "the disk: a partition or a path means its whole disk, as systemd's IOReadBandwidthMax= does"},
			{Name: "read_bps", Type: TypeBytes, DefaultNote: "unlimited", Unit: "bytes per second", Bounds: ">= 1", Example: tomlString("50MiB"),
				Doc: "read bandwidth"},
			{Name: "write_bps", Type: TypeBytes, DefaultNote: "unlimited", Unit: "bytes per second", Bounds: ">= 1", Example: tomlString("20MiB"),
				Doc: "write bandwidth"},
			{Name: "read_iops", Type: TypeInteger, DefaultNote: "unlimited", Unit: "operations per second", Bounds: ">= 1", Example: "1000",
				Doc: "read operations"},
			{Name: "write_iops", Type: TypeInteger, DefaultNote: "unlimited", Unit: "operations per second", Bounds: ">= 1", Example: "500",
				Doc: "write operations"},
		},
	},
}

// limitTypes is the Type of each kind of limit.
var limitTypes = map[limits.Kind]Type{
	limits.KindNumber:   TypeNumber,
	limits.KindInteger:  TypeInteger,
	limits.KindBytes:    TypeBytes,
	limits.KindDuration: TypeDuration,
	limits.KindString:   TypeString,
	limits.KindDevices:  TypeTables,
}

// limitKeys is the limits section's keys: the table of limits
// (limits.Keys), an io entry's keys in SectionIO.
func limitKeys() []Key {
	var out []Key
	for _, k := range limits.Keys() {
		key := Key{Name: k.Name, Type: limitTypes[k.Kind], Default: k.Default, DefaultNote: k.DefaultNote,
			Unit: k.Unit, Bounds: k.Bounds, Example: k.Example, Doc: k.Doc}
		if r := k.Range; r != nil {
			key.Range = &Range{Min: r.Min, Max: r.Max, Source: r.Source}
		}
		if k.Kind == limits.KindDevices {
			key.Section = SectionIO
		}
		out = append(out, key)
	}
	return out
}

// sectionIndex maps a section ID to its index in sections.
var sectionIndex = func() map[string]int {
	m := make(map[string]int, len(sections))
	for i, s := range sections {
		m[s.ID] = i
	}
	return m
}()

// Sections returns the reference of every table of berth's files, in the
// order docs/config.md lists them. The slices are shared: do not modify
// them.
func Sections() []Section { return sections }

// LookupSection returns the section with the given ID; false when there is
// none.
func LookupSection(id string) (Section, bool) {
	i, ok := sectionIndex[id]
	if !ok {
		return Section{}, false
	}
	return sections[i], true
}

// Lookup returns key name of section id; false when the section has no such
// key.
func (s Section) Lookup(name string) (Key, bool) {
	for _, k := range s.Keys {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}

// mustKey returns key name of section id; the decoder asks only for keys
// that exist (a test reads every key), so a miss is a bug and panics.
func mustKey(section, name string) Key {
	s, ok := LookupSection(section)
	if !ok {
		panic("config: no section " + section)
	}
	k, ok := s.Lookup(name)
	if !ok {
		panic("config: section " + section + " has no key " + name)
	}
	return k
}

// ExampleFile returns an agent file that sets every key of the reference
// to its Example value (of two keys that exclude each other, the one
// without Excludes): one [[group]] and one [[connector]] with both
// [connector.run] and [connector.task], each with limits and one io entry.
// It validates against a nil Host (a test checks that).
func ExampleFile() string {
	var b strings.Builder
	writeExample(&b, "", SectionFile, "")
	return strings.TrimLeft(b.String(), "\n")
}

// writeExample writes the keys of section sec at TOML key path path, then
// its sub-tables, indented by indent.
func writeExample(b *strings.Builder, path, sec, indent string) {
	s, _ := LookupSection(sec)
	for _, k := range s.Keys {
		if k.Type != TypeTable && k.Type != TypeTables && k.Excludes == "" {
			fmt.Fprintf(b, "%s%s = %s\n", indent, k.Name, k.Example)
		}
	}
	for _, k := range s.Keys {
		sub := k.Name
		if path != "" {
			sub = path + "." + k.Name
		}
		inner := indent
		if path != "" {
			inner += "  "
		}
		switch k.Type {
		case TypeTable:
			fmt.Fprintf(b, "\n%s[%s]\n", inner, sub)
			writeExample(b, sub, k.Section, inner)
		case TypeTables:
			fmt.Fprintf(b, "\n%s[[%s]]\n", inner, sub)
			writeExample(b, sub, k.Section, inner)
		}
	}
}
