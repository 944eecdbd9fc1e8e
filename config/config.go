package config

import "time"

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
	Workload
	// Warnings are values that validate but may not mean what was meant,
	// each "FILE:LINE:COL: key: message": a byte size whose one-letter
	// unit systemd reads otherwise ("1G"), and [static] entries that name
	// no job of the file (CheckDeclarations). `berth validate --strict`
	// treats them as errors; the agent logs them.
	Warnings []*Problem

	pos *positions // where each key of the file is, for CheckDeclarations
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
	// KillMode is which processes of a job a stop signals (KillMode), used
	// when the job's process does not set its own.
	KillMode KillMode
	// KillSignal is the signal a stop sends (kill_signal), used when the
	// job's process does not set its own.
	KillSignal Signal
	// WebConfigFile is the absolute path of the web configuration file of
	// the listener (TLS, client certificates, basic auth), in the format of
	// the Prometheus exporter-toolkit that node_exporter's
	// --web.config.file takes; "" serves plain HTTP to everyone.
	WebConfigFile string
	// Client is [agent.client]: what berth's own requests to an agent's
	// API present (the CLI on this host, this agent asking its peers).
	Client APIClient
}

// APIClient is [agent.client]: the TLS trust and credentials that berth's
// own HTTP requests to agents' APIs use (berth status and the other
// commands that ask the agent of their --config, and an agent asking its
// peers for their jobs' states). Zero: plain requests, the system's CAs.
type APIClient struct {
	// TLS: CA is the CA bundle that signed the agents' server
	// certificates (empty: the system's); Cert and Key are the client
	// certificate presented to an agent whose web configuration asks for
	// one; ServerName overrides the name the server certificate is checked
	// against (default: the host of the address).
	TLS TLS
	// Username is the basic-auth user name; "" sends no basic auth.
	Username string
	// Password is the basic-auth password, written in the file itself;
	// exclusive with PasswordFile.
	Password string
	// PasswordFile is the absolute path of a file holding the basic-auth
	// password (read with ReadPasswordFile: only its owner may read it).
	PasswordFile string
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
	Protocol Protocol
	// TLS for the etcd client; zero when not configured.
	TLS TLS
	// Username is the etcd user (etcd's authentication, "etcdctl user
	// add"); "" uses none, or the client certificate's common name when
	// the server runs with --client-cert-auth.
	Username string
	// Password is the etcd user's password written in the file itself;
	// exclusive with PasswordFile.
	Password string
	// PasswordFile is the absolute path of a file holding the etcd user's
	// password (read with ReadPasswordFile when the agent connects).
	PasswordFile string
}

// TLS names the PEM files of a client's TLS configuration.
type TLS struct {
	// CA is the bundle that signed the servers' certificates; "" trusts
	// the system's CAs.
	CA string
	// Cert and Key are the client certificate and its private key, given
	// together; "" presents none.
	Cert, Key string
	// ServerName is the name the server's certificate must carry; "" uses
	// the host of the address dialled.
	ServerName string
}

// Enabled reports whether any TLS setting is given: the client then speaks
// TLS.
func (t TLS) Enabled() bool { return t != TLS{} }
