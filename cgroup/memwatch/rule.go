package memwatch

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Bounds of a Rule, for the configuration's checks.
const (
	// MinDuration is the shortest Rule.Duration: the kernel's smallest
	// trigger window, 500 ms (Documentation/accounting/psi.rst,
	// "Monitoring for pressure thresholds").
	MinDuration = 500 * time.Millisecond
	// MaxWindow is the longest trigger window berth writes for its own
	// watch: the kernel checks a privileged trigger ten times per window,
	// so a window of at most 2 s sees a crossing within 200 ms. A longer
	// Duration is held over consecutive windows (see Rule).
	MaxWindow = 2 * time.Second
	// unprivilegedWindow is the step of the window of a trigger made
	// without CAP_SYS_RESOURCE: the kernel accepts only multiples of 2 s
	// there, and updates such triggers with its averages, every 2 s
	// (psi.rst; kernel/sched/psi.c PSI_FREQ).
	unprivilegedWindow = 2 * time.Second
	// maxKernelWindow is the kernel's longest trigger window (psi.rst).
	maxKernelWindow = 10 * time.Second
)

// ErrRule is returned (wrapped, naming the field and the allowed values)
// for a Rule the watch cannot take.
var ErrRule = errors.New("invalid memory pressure rule")

// Rule says when a job's memory counts as under pressure. Which fields
// apply depends on the cgroup version that accounts the job's memory
// (Watch):
//
//   - cgroup v2 (PSI): the share of wall time during which at least one
//     task of the job's cgroup stalled on memory (memory.pressure "some",
//     as systemd-oomd's ManagedOOMMemoryPressureLimit= reads it) is at
//     least Limit percent, held for Duration. The kernel's trigger watches
//     one window of at most MaxWindow (Window); a longer Duration is held
//     when consecutive trigger events each add a window in which the
//     stall reached the window's threshold. The kernel fires at most once
//     per window while the stall holds, so consecutive events are about
//     one window apart.
//   - cgroup v1 (legacy and hybrid hosts), whose PSI gives no warning of
//     the limit: the job's memory.usage_in_bytes crosses High bytes (the
//     job's memory_high, which v1 cannot enforce).
type Rule struct {
	// Limit is the stall share, in percent of wall time (0 < Limit ≤ 100):
	// memory_pressure_limit.
	Limit float64
	// Duration is how long the stall share must hold, at least
	// MinDuration: memory_pressure_duration.
	Duration time.Duration
	// High is the v1 usage threshold in bytes (memory_high), 0 when the
	// job has none. The kernel compares it in whole pages (rounded down).
	High int64
}

// checkPressure reports whether r's PSI fields are usable. Errors: ErrRule
// naming the field.
func (r Rule) checkPressure() error {
	if math.IsNaN(r.Limit) || r.Limit <= 0 || r.Limit > 100 {
		return fmt.Errorf("%w: limit %v%%: must be more than 0 and at most 100", ErrRule, r.Limit)
	}
	if r.Duration < MinDuration {
		return fmt.Errorf("%w: duration %v: must be at least %v (the kernel's shortest PSI window)", ErrRule, r.Duration, MinDuration)
	}
	return nil
}

// checkThreshold reports whether r's v1 field is usable. Errors: ErrRule.
func (r Rule) checkThreshold() error {
	if r.High <= 0 {
		return fmt.Errorf("%w: cgroup v1 memory has no pressure stall warning before its limit: the watch needs a usage threshold (memory_high), got %d bytes", ErrRule, r.High)
	}
	return nil
}

// trigger is what a PSI watch writes and how it counts the events: the
// kernel's window and threshold, and how much of the rule's Duration the
// events must cover.
type trigger struct {
	// window is the kernel's tracking window, threshold the stall within
	// it that fires an event (µs in the file).
	window, threshold time.Duration
	// hold is the span the events must cover before Over is reported:
	// Duration less the kernel's polling slack (window/10), so that an
	// event the loop saw a little late does not push Over a window later.
	hold time.Duration
	// gap is the longest time between two events of one chain
	// (psiState.observe).
	gap time.Duration
}

// String is the trigger as the kernel takes it: "some <threshold µs>
// <window µs>" (psi.rst), without the NUL that Watch appends.
func (t trigger) String() string {
	return fmt.Sprintf("some %d %d", t.threshold.Microseconds(), t.window.Microseconds())
}

// triggerFor is the trigger of a watch of r by the agent: privileged when
// the agent has CAP_SYS_RESOURCE (the kernel then accepts any window from
// 500 ms to 10 s and checks it ten times per window), else bound to the
// unprivileged rules (windows of a multiple of 2 s, checked every 2 s).
//
// Privileged: the window is Duration split into the fewest equal parts of
// at most MaxWindow (a Duration of 30 s: 15 windows of 2 s; of 1 s: one
// window of 1 s). Unprivileged: 2 s.
//
// The gap between two events of a chain is 1½ windows privileged (the
// checks are a tenth of a window apart), 2¼ unprivileged (a 2 s check
// that runs late defers the next event to the check after).
func triggerFor(r Rule, privileged bool) trigger {
	w := unprivilegedWindow
	gap := 2*w + w/4
	if privileged {
		n := (r.Duration + MaxWindow - 1) / MaxWindow
		w = (r.Duration / n).Truncate(time.Microsecond)
		gap = w + w/2
	}
	return trigger{window: w, threshold: share(r.Limit, w), hold: max(r.Duration-w/10, w), gap: gap}
}

// notifyTrigger is the trigger a job is given to write itself (Notify).
// The job is unprivileged (a job with `user` has no capabilities, and
// berth's unit leaves out CAP_SYS_RESOURCE), so the window is Duration
// rounded to a multiple of 2 s, from 2 s to the kernel's 10 s.
func notifyTrigger(r Rule) trigger {
	n := (r.Duration + unprivilegedWindow/2) / unprivilegedWindow
	w := min(max(n*unprivilegedWindow, unprivilegedWindow), maxKernelWindow)
	return trigger{window: w, threshold: share(r.Limit, w), hold: w}
}

// share is limit percent of w, rounded to the µs, at least 1 µs and at
// most w (the kernel's bounds for a threshold).
func share(limit float64, w time.Duration) time.Duration {
	us := math.Round(limit / 100 * float64(w.Microseconds()))
	return time.Duration(min(max(us, 1), float64(w.Microseconds()))) * time.Microsecond
}
