package supervisor

import (
	"fmt"
	"time"

	"github.com/berthd/berth/worker"
)

// busyLimit is how long one pass of the agent's loop (a reconcile or a
// reload) may take before the loop counts as stuck: every stop in a pass
// runs concurrently and is bounded by its stop_timeout plus the time to
// kill and remove the cgroup (30 s, see stopJob).
func (a *Agent) busyLimit() time.Duration {
	a.mu.RLock()
	defer a.mu.RUnlock()
	longest := a.cfg.Agent.StopTimeout
	for _, j := range a.jobs {
		if t := j.spec.Process.StopTimeout; t > longest {
			longest = t
		}
	}
	return longest + time.Minute
}

// busy marks the loop as working from now until the returned func is
// called.
func (a *Agent) busy() func() {
	a.busySince.Store(time.Now().UnixNano())
	return func() { a.busySince.Store(0) }
}

// Healthy reports whether the agent's loop is waiting for work, or has been
// working on one pass for less than its bound. The service manager's
// watchdog is fed only while it holds (systemd WatchdogSec=).
func (a *Agent) Healthy() bool {
	since := a.busySince.Load()
	return since == 0 || time.Since(time.Unix(0, since)) < a.busyLimit()
}

// Summary is a one-line state of the agent for the service manager's
// STATUS= (systemctl status): jobs by state and the assignment generation.
func (a *Agent) Summary() string {
	a.mu.RLock()
	js := make([]*job, 0, len(a.jobs))
	for _, j := range a.jobs {
		js = append(js, j)
	}
	gen := a.desired.Generation
	a.mu.RUnlock()
	var running, failed, waiting, other int
	for _, j := range js {
		switch {
		case j.holder != "":
			waiting++
		case j.w == nil:
			failed++
		case j.w.Status().State == worker.Running:
			running++
		case j.w.Status().State == worker.Failed:
			failed++
		default:
			other++
		}
	}
	state := a.source.Info().State
	jobs := "jobs"
	if running == 1 {
		jobs = "job"
	}
	return fmt.Sprintf("%s; %d %s running, %d failed, %d waiting for a claim, %d other; assignment generation %d",
		state, running, jobs, failed, waiting, other, gen)
}
