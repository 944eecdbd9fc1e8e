package spec

import "time"

// MemoryPressure is a job's memory pressure action (memory_pressure): what
// the agent does when the job's memory comes under pressure, before the
// kernel's OOM killer does.
type MemoryPressure string

// Memory pressure actions.
const (
	// PressureNone: nothing (the kernel's OOM killer acts at the limit).
	// The default.
	PressureNone MemoryPressure = "none"
	// PressureNotify: the job is given systemd's memory pressure service
	// protocol (systemd.io/MEMORY_PRESSURE): $MEMORY_PRESSURE_WATCH, its
	// own cgroup's memory.pressure, and $MEMORY_PRESSURE_WRITE, the
	// trigger to write to it, so that it sheds caches itself.
	PressureNotify MemoryPressure = "notify"
	// PressureRestart: the agent stops the job gracefully (kill_signal,
	// then stop_timeout) and the restart policy applies.
	PressureRestart MemoryPressure = "restart"
)

// MemoryPressures are memory_pressure's values, in the reference's order.
func MemoryPressures() []string {
	return []string{string(PressureNone), string(PressureNotify), string(PressureRestart)}
}

// Defaults and bounds of memory_pressure_limit and
// memory_pressure_duration. docs/operating.md ("Memory pressure") says
// why these defaults: a graceful action must start while the job still
// has room to stop within its stop_timeout, so it acts earlier than
// systemd-oomd's default for killing (ManagedOOMMemoryPressureLimit=60 %
// for 30 s, oomd.conf(5)): 10 % for 2 s is systemd's own default trigger
// of MemoryPressureWatch= (MemoryPressureThresholdSec=200ms in a 2 s
// window, systemd.resource-control(5)).
const (
	// DefaultPressureLimit is memory_pressure_limit's default, in percent
	// of wall time stalled ("some").
	DefaultPressureLimit = 10.0
	// DefaultPressureDuration is memory_pressure_duration's default.
	DefaultPressureDuration = 2 * time.Second
	// MinPressureDuration is the shortest memory_pressure_duration: the
	// kernel's shortest PSI trigger window, 500 ms
	// (Documentation/accounting/psi.rst).
	MinPressureDuration = 500 * time.Millisecond
	// MaxPressureDuration is the longest memory_pressure_duration, the
	// systemd-oomd default's 30 s twice over: a stall held longer than
	// this is one the action comes far too late for.
	MaxPressureDuration = time.Minute
)

// PressureRule is a job's memory pressure action and when it fires: the
// memory_pressure keys of [connector.run] and [connector.task].
type PressureRule struct {
	// Action is memory_pressure; "" means PressureNone.
	Action MemoryPressure
	// Limit is memory_pressure_limit: the share of wall time during which
	// at least one of the job's tasks stalled on memory (PSI "some"), in
	// percent (0 < Limit <= 100); 0 means DefaultPressureLimit.
	Limit float64
	// Duration is memory_pressure_duration: how long the stall share must
	// hold; 0 means DefaultPressureDuration.
	Duration time.Duration
}

// Effective returns r with its defaults filled in: Action PressureNone,
// Limit DefaultPressureLimit, Duration DefaultPressureDuration where r
// leaves them 0.
func (r PressureRule) Effective() PressureRule {
	if r.Action == "" {
		r.Action = PressureNone
	}
	if r.Limit == 0 {
		r.Limit = DefaultPressureLimit
	}
	if r.Duration == 0 {
		r.Duration = DefaultPressureDuration
	}
	return r
}

// Acts reports whether the rule does anything (notify or restart).
func (r PressureRule) Acts() bool {
	return r.Action == PressureNotify || r.Action == PressureRestart
}
