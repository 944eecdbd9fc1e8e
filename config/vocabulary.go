package config

import (
	"time"

	"github.com/berthd/berth/spec"
)

// The job vocabulary (kinds, task IDs, protocols, restart policies,
// target states, definition kinds) lives in package spec. The names below
// are for the transition of the packages that still name them through
// config: new code uses spec's.
type (
	Kind        = spec.Kind
	Protocol    = spec.Protocol
	Restart     = spec.Restart
	TargetState = spec.TargetState
	DefKind     = spec.DefKind
	KillMode    = spec.KillMode
	Signal      = spec.Signal
)

// Transitional re-declarations of spec's constants (see above).
const (
	KindConnector      = spec.KindConnector
	KindTask           = spec.KindTask
	ProtocolStatic     = spec.ProtocolStatic
	ProtocolBalanced   = spec.ProtocolBalanced
	RestartAlways      = spec.RestartAlways
	RestartOnFailure   = spec.RestartOnFailure
	RestartNever       = spec.RestartNever
	TargetRunning      = spec.TargetRunning
	TargetPaused       = spec.TargetPaused
	TargetStopped      = spec.TargetStopped
	DefConnector       = spec.DefConnector
	DefGroup           = spec.DefGroup
	DefaultStopTimeout = spec.DefaultStopTimeout
	DefaultRestart     = spec.DefaultRestart
	MaxNameLen         = spec.MaxNameLen
	MaxTasks           = spec.MaxTasks
	KillControlGroup   = spec.KillControlGroup
	KillMixed          = spec.KillMixed
	KillProcess        = spec.KillProcess
	DefaultKillMode    = spec.DefaultKillMode
	DefaultKillSignal  = spec.DefaultKillSignal
)

// TaskID is spec.TaskID, for the transition (see above).
func TaskID(connector string, n int) string { return spec.TaskID(connector, n) }

// Defaults of the agent file (docs/config.md lists every key).
const (
	DefaultDataDir     = "/var/lib/berth"
	DefaultLogDir      = "/var/log/berth"
	DefaultLogMaxSize  = 10 << 20 // bytes
	DefaultLogMaxFiles = 5
	DefaultListen      = "127.0.0.1:9750"
	// DefaultCgroupRoot is cgroup_root: a path below each hierarchy's root.
	DefaultCgroupRoot = "berth"
	// DefaultClusterName is the key prefix "/berth/<name>/" in etcd.
	DefaultClusterName = "berth"
	// DefaultSessionTTL is the session lease TTL, whole seconds.
	DefaultSessionTTL = 10 * time.Second
	// MinSessionTTL is the shortest session_ttl: the fencing margin is
	// max(1 s, TTL/5), so a shorter lease leaves no time to renew.
	MinSessionTTL = 2 * time.Second
)
