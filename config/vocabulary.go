package config

import (
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The one vocabulary every berth package uses: job kinds, task IDs, the
// assignment protocol, restart policies, definition kinds and the defaults
// of the agent file. Each is declared here and nowhere else.

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

// KillMode is which processes of a job a stop signals, named as systemd's
// KillMode= values (systemd.kill(5)). Whatever the mode, a stop ends with
// no process of the job left: once the grace (stop_timeout) is over, or
// once the main process has exited in mode mixed, every process still in
// the job's cgroup is killed with SIGKILL, and the cgroup is removed.
type KillMode string

// Kill modes.
const (
	// KillControlGroup sends the stop signal to every process of the
	// job's cgroup, waits until the cgroup is empty or the grace is over,
	// then SIGKILLs what is left (systemd KillMode=control-group). The
	// default.
	KillControlGroup KillMode = "control-group"
	// KillMixed sends the stop signal to the main process only; once it
	// has exited, or the grace is over, every process left in the cgroup
	// gets SIGKILL (systemd KillMode=mixed).
	KillMixed KillMode = "mixed"
	// KillProcess sends the stop signal to the main process only, and
	// leaves the others alone until the cgroup is empty or the grace is
	// over; then what is left gets SIGKILL (systemd KillMode=process,
	// except that systemd leaves the others running for good).
	KillProcess KillMode = "process"
)

// Signal is a stop signal (kill_signal) by its canonical name, "SIGTERM";
// "" means the default (DefaultKillSignal, or what [agent] kill_signal
// says for a process).
type Signal string

// stopSignals are the signals kill_signal accepts (signal(7)), in the
// order docs/config.md lists them: those that ask a program to stop or
// that programs commonly take as their stop request (nginx: SIGQUIT,
// httpd: SIGWINCH), and SIGKILL for no grace at all.
var stopSignals = []struct {
	name Signal
	num  syscall.Signal
}{
	{"SIGTERM", syscall.SIGTERM}, {"SIGINT", syscall.SIGINT}, {"SIGQUIT", syscall.SIGQUIT},
	{"SIGHUP", syscall.SIGHUP}, {"SIGUSR1", syscall.SIGUSR1}, {"SIGUSR2", syscall.SIGUSR2},
	{"SIGWINCH", syscall.SIGWINCH}, {"SIGKILL", syscall.SIGKILL},
}

// StopSignalNames lists the canonical names of the signals kill_signal
// accepts: "SIGTERM", "SIGINT", ...
func StopSignalNames() []string {
	out := make([]string, len(stopSignals))
	for i, s := range stopSignals {
		out[i] = string(s.name)
	}
	return out
}

// ParseSignal reads a kill_signal value: a name of StopSignalNames, with or
// without its "SIG" prefix ("SIGTERM", "TERM", as systemd's KillSignal=
// takes them). ok is false for anything else.
func ParseSignal(s string) (sig Signal, ok bool) {
	name := s
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	for _, x := range stopSignals {
		if string(x.name) == name {
			return x.name, true
		}
	}
	return "", false
}

// Number is the signal's number; "" and an unknown name give SIGTERM.
func (s Signal) Number() syscall.Signal {
	for _, x := range stopSignals {
		if x.name == s {
			return x.num
		}
	}
	return syscall.SIGTERM
}

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

// Defaults of the agent file (docs/config.md lists every key).
const (
	DefaultDataDir     = "/var/lib/berth"
	DefaultLogDir      = "/var/log/berth"
	DefaultLogMaxSize  = 10 << 20 // bytes
	DefaultLogMaxFiles = 5
	DefaultListen      = "127.0.0.1:9750"
	// DefaultCgroupRoot is cgroup_root: a path below each hierarchy's root.
	DefaultCgroupRoot = "berth"
	// DefaultStopTimeout is the grace between SIGTERM and killing a job's
	// cgroup, as `docker stop` uses by default.
	DefaultStopTimeout = 10 * time.Second
	// DefaultKillMode is kill_mode when neither the process nor [agent]
	// sets it, as systemd's KillMode= defaults.
	DefaultKillMode = KillControlGroup
	// DefaultKillSignal is kill_signal when neither the process nor
	// [agent] sets it, as systemd's KillSignal= defaults.
	DefaultKillSignal Signal = "SIGTERM"
	// DefaultClusterName is the key prefix "/berth/<name>/" in etcd.
	DefaultClusterName = "berth"
	// DefaultSessionTTL is the session lease TTL, whole seconds.
	DefaultSessionTTL = 10 * time.Second
	// MinSessionTTL is the shortest session_ttl: the fencing margin is
	// max(1 s, TTL/5), so a shorter lease leaves no time to renew.
	MinSessionTTL = 2 * time.Second
	// DefaultRestart is a process's restart policy when it sets none.
	DefaultRestart = RestartOnFailure
	// MaxNameLen is the longest connector, group or agent name and job ID,
	// bytes.
	MaxNameLen = 128
	// MaxTasks is the most tasks one connector may have.
	MaxTasks = 100000
)
