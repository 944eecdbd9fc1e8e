package worker

import (
	"fmt"
	"time"
)

// Policy says whether a worker's process is started again after it exits.
type Policy string

// Restart policies, named as systemd's Restart= values (systemd.service(5)).
const (
	// Always restarts after every exit.
	Always Policy = "always"
	// OnFailure restarts after a non-zero exit status or death by a signal
	// (systemd Restart=on-failure).
	OnFailure Policy = "on-failure"
	// Never leaves the worker Exited after its first exit (systemd Restart=no).
	Never Policy = "never"
)

// ParsePolicy returns the Policy named by s ("always", "on-failure",
// "never"; "" means Never), or an error naming s.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case Always, OnFailure, Never:
		return p, nil
	case "":
		return Never, nil
	}
	return "", fmt.Errorf("restart policy %q: want always, on-failure or never", s)
}

// restarts reports whether p starts the job again after e.
func (p Policy) restarts(e Exit) bool {
	switch p {
	case Always:
		return true
	case OnFailure:
		return e.failed()
	}
	return false
}

// Backoff is the delay before each restart: Initial, doubled after every
// restart up to Max, and back to Initial once a run has lasted Reset. The
// shape is systemd's RestartSec= growing by RestartSteps= up to
// RestartMaxDelaySec= (systemd.service(5)) and Nomad's reschedule block with
// delay_function = "exponential" and max_delay; the numbers are berth's:
// 1 s doubling to 60 s, and the reset after 10 min of continuous run is
// Kubernetes' CrashLoopBackOff rule (its back-off resets once a container
// has run 10 min without a problem).
type Backoff struct {
	Initial time.Duration // first delay; default 1 s
	Max     time.Duration // upper bound of the delay; default 60 s
	Reset   time.Duration // a run at least this long resets the delay; default 10 min
}

// DefaultBackoff is the Backoff used for zero fields of Spec.Backoff.
var DefaultBackoff = Backoff{Initial: time.Second, Max: 60 * time.Second, Reset: 10 * time.Minute}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultBackoff.Initial
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoff.Max
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if b.Reset <= 0 {
		b.Reset = DefaultBackoff.Reset
	}
	return b
}

// next returns the delay after a run that lasted ran, given the previous
// delay prev (0 before the first restart).
func (b Backoff) next(prev, ran time.Duration) time.Duration {
	if prev == 0 || ran >= b.Reset {
		return b.Initial
	}
	d := prev * 2
	if d > b.Max || d <= 0 {
		d = b.Max
	}
	return d
}
