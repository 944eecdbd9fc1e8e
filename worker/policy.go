package worker

import (
	"time"

	"github.com/berthd/berth/spec"
)

// restarts reports whether the restart policy p (systemd's Restart=
// values, spec.Restart) starts the job again after e.
func restarts(p spec.Restart, e Exit) bool {
	switch p {
	case spec.RestartAlways:
		return true
	case spec.RestartOnFailure:
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

// DefaultBackoff returns the Backoff used for zero fields of Spec.Backoff:
// 1 s doubling to 60 s, reset after 10 min of run.
func DefaultBackoff() Backoff {
	return Backoff{Initial: time.Second, Max: 60 * time.Second, Reset: 10 * time.Minute}
}

func (b Backoff) withDefaults() Backoff {
	def := DefaultBackoff()
	if b.Initial <= 0 {
		b.Initial = def.Initial
	}
	if b.Max <= 0 {
		b.Max = def.Max
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if b.Reset <= 0 {
		b.Reset = def.Reset
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
