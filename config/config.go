package config

import (
	"time"

	"github.com/berthd/berth/spec"
)

// Config is a parsed and validated agent file.
type Config struct {
	// File is the name the configuration was read from.
	File string
	// SHA256 is the hex SHA-256 of the file's bytes as parsed: which
	// version of the file is in force (GET /v1/agent).
	SHA256  string
	Agent   Agent
	Static  Static
	Cluster Cluster
	// Workload holds the [[group]] and [[connector]] blocks of the file.
	spec.Workload
	// Warnings are values that validate but may not mean what was meant,
	// each "FILE:LINE:COL: key: message": a byte size whose one-letter
	// unit systemd reads otherwise ("1G"), and [static] entries that name
	// no job of the file (CheckDeclarations). `berth validate --strict`
	// treats them as errors; the agent logs them.
	Warnings []*Problem

	// pos is where each key of [static] is in the file, for
	// CheckDeclarations; the other keys' positions serve only Parse's own
	// messages and are not kept (the agent holds its Config for its life).
	pos *positions
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
	// Advertise is the host:port other members reach the API at (its
	// member record); "" means Listen, its unspecified host replaced by
	// an address of this host (daemon).
	Advertise string
	// CgroupRoot is the agent's cgroup relative to each hierarchy root;
	// "" means the cgroup systemd delegated to the agent.
	CgroupRoot string
	// StopTimeout is the grace between SIGTERM and killing a job's cgroup,
	// used when the job's process does not set its own.
	StopTimeout time.Duration
	// KillMode is which processes of a job a stop signals (KillMode), used
	// when the job's process does not set its own.
	KillMode spec.KillMode
	// KillSignal is the signal a stop sends (kill_signal), used when the
	// job's process does not set its own.
	KillSignal spec.Signal
	// WebConfigFile is the absolute path of the web configuration file of
	// the listener (TLS, client certificates, basic auth), in the format of
	// the Prometheus exporter-toolkit that node_exporter's
	// --web.config.file takes; "" serves plain HTTP to everyone.
	WebConfigFile string
	// AllowedHosts are host names, besides IP addresses, localhost, this
	// host's name and Listen's host, that a plain-HTTP request to the
	// API may name in its Host header (a port, if given, is ignored); "*"
	// allows every name. Other names are refused with 421: what a
	// DNS-rebinding web page sends (etcd's --host-whitelist).
	AllowedHosts []string
	// Client is [agent.client]: what berth's own requests to an agent's
	// API present (the CLI on this host, this agent asking its peers).
	Client spec.APIClient
}

// Static is the [static] table: the jobs this agent declares it will run
// (KIP-987 static.connectors / static.tasks). Names of connectors that do
// not exist are allowed (docs/design.md, assignment rule 3).
type Static struct {
	Connectors []string
	Tasks      []string
}

// Cluster is the [cluster] table.
type Cluster struct {
	// Name of the cluster: every key lives under "/berth/<Name>/";
	// default DefaultClusterName.
	Name string
	// Endpoints of the etcd cluster; empty runs an embedded etcd.
	Endpoints []string
	// SessionTTL is the etcd lease TTL, whole seconds, >= MinSessionTTL;
	// default DefaultSessionTTL.
	SessionTTL time.Duration
	// RebalanceDelay is how long a departed member's jobs stay unassigned
	// (Connect's scheduled.rebalance.max.delay.ms); default 0.
	RebalanceDelay time.Duration
	// Protocol is ProtocolStatic (default) or ProtocolBalanced.
	Protocol spec.Protocol
	// TLS for the etcd client; zero when not configured.
	TLS spec.TLS
	// Username is the etcd user (etcd's authentication, "etcdctl user
	// add"); "" uses none, or the client certificate's common name when
	// the server runs with --client-cert-auth.
	Username string
	// Password is the etcd user's password written in the file itself;
	// exclusive with PasswordFile.
	Password string
	// PasswordFile is the absolute path of a file holding the etcd user's
	// password (read with host.ReadPasswordFile when the agent connects).
	PasswordFile string
}
