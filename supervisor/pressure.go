package supervisor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/cgroup/memwatch"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/spec"
)

// The memory pressure action (memory_pressure): one memwatch.Watcher per
// agent (one goroutine, one epoll set, one descriptor per watched job), a
// watch per job whose action is notify or restart on the job's cgroup,
// which outlives its runs, and one goroutine of the agent (watchPressure,
// owned by Run) that takes the watcher's events and acts on them. No
// goroutine, timer or poll per job.

// watchJob starts the memory pressure watch of job j in its cgroup g, when
// j's action asks for one, and returns it with the environment every run
// gets (notify: memwatch.Notify's $MEMORY_PRESSURE_WATCH and
// $MEMORY_PRESSURE_WRITE). restart watches what the cgroup version that
// accounts the job's memory allows (memwatch.Watch: a usage threshold at
// memory_high on v1 memory, a PSI trigger on v2); notify watches the PSI
// trigger the job is told to write, in the cgroup2 tree, to count the
// events it gets. Errors: no watcher (it could not start), or the watch
// refused (a restart without memory_high on v1, which validation refuses
// too; a kernel without PSI): a restart cannot start without its watch,
// a notify job runs without (the caller logs it).
func (e *executor) watchJob(j spec.Job, g *cgroup.Group) (*memwatch.Handle, []string, error) {
	r := j.Process.MemoryPressure.Effective()
	if !r.Acts() {
		return nil, nil, nil
	}
	if e.mem == nil {
		return nil, nil, fmt.Errorf("memory_pressure %s: %w", r.Action, e.memErr)
	}
	t := memwatch.TargetOf(g)
	rule := memwatch.Rule{Limit: r.Limit, Duration: r.Duration, High: j.Process.Limits.MemoryHigh}
	var env []string
	if r.Action == spec.PressureNotify {
		var err error
		if env, err = memwatch.Notify(t, rule); err != nil {
			return nil, nil, fmt.Errorf("memory_pressure notify: %w", err)
		}
		// A job with a user of its own must be able to write its trigger,
		// as systemd relaxes the file for MemoryPressureWatch=.
		if j.Process.User != "" {
			cred, err := host.ResolveCredential(j.Process.User)
			if err == nil {
				err = memwatch.Delegate(t, int(cred.Uid), int(cred.Gid))
			}
			if err != nil {
				return nil, env, fmt.Errorf("memory_pressure notify: give %s's memory.pressure to user %s: %w", j.ID, j.Process.User, err)
			}
		}
		t.V1Dir = "" // the trigger the job writes: PSI in the cgroup2 tree
	}
	h, err := e.mem.Watch(t, rule)
	if err != nil {
		return nil, env, fmt.Errorf("memory_pressure %s: %w", r.Action, err)
	}
	return h, env, nil
}

// unwatch ends j's memory pressure watch, if it has one: before its
// cgroup is deleted (memwatch.Watch). The table's mu is not held.
func (e *executor) unwatch(j *job) {
	e.tbl.mu.Lock()
	h := j.watch
	j.watch = nil
	e.tbl.mu.Unlock()
	if h != nil {
		h.Close()
	}
}

// rewatch registers j's v1 threshold again when an in-place update
// changed memory_high (the kernel's threshold is fixed at registration);
// a PSI watch does not depend on the limits. The table's mu is not held.
func (e *executor) rewatch(j *job, old, nj spec.Job) {
	if old.Process.Limits.MemoryHigh == nj.Process.Limits.MemoryHigh || j.group == nil {
		return
	}
	e.tbl.mu.RLock()
	h := j.watch
	e.tbl.mu.RUnlock()
	if h == nil || h.Mechanism() != memwatch.Threshold {
		return
	}
	nh, _, err := e.watchJob(nj, j.group)
	if err != nil {
		e.log.Error("memory pressure watch of the new memory_high; the old threshold stays", "job_id", nj.ID, "error", err)
		return
	}
	e.tbl.mu.Lock()
	j.watch = nh
	e.tbl.mu.Unlock()
	h.Close()
	e.log.Info("memory pressure threshold moved to the new memory_high", "job_id", nj.ID, "trigger", nh.Trigger())
}

// watchPressure takes the memory watcher's events until ctx ends and acts
// on each: restart stops the job's run gracefully (worker.PressureStop),
// notify counts it. It is the one long-lived goroutine of every job's
// watch. Each event is acted on in a goroutine of its own, which it waits
// for before it returns: a stop signal to a cgroup freezes it first
// (cgroup.Group.Signal), which can take a while on a loaded host, and
// must not hold up another job's stop (with 20 jobs crossing at once the
// leak test's p99 of the stop signal went from 560 ms to 75 ms).
func (a *Agent) watchPressure(ctx context.Context) {
	e := a.exec
	if e.mem == nil {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	var evs []memwatch.Event
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.mem.Ready():
		}
		evs = e.mem.Drain(evs[:0])
		for _, ev := range evs {
			wg.Go(func() { e.onPressure(ev) })
		}
	}
}

// onPressure acts on one event of the memory watcher.
func (e *executor) onPressure(ev memwatch.Event) {
	var j *job
	e.tbl.mu.RLock()
	for _, c := range e.tbl.jobs {
		if c.watch == ev.Handle {
			j = c
			break
		}
	}
	var action spec.MemoryPressure
	if j != nil {
		action = j.spec.Process.MemoryPressure.Effective().Action
	}
	e.tbl.mu.RUnlock()
	if j == nil {
		return // closed meanwhile
	}
	id := j.spec.ID
	switch ev.Kind {
	case memwatch.Under:
		return
	case memwatch.Gone, memwatch.Failed:
		e.log.Error("memory pressure watch ended", "job_id", id, "event", ev.Kind.String(), "error", ev.Err)
		return
	}
	cause := pressureCause(ev)
	if action == spec.PressureNotify {
		e.tbl.mu.Lock()
		j.pressureNotified++
		e.tbl.mu.Unlock()
		e.log.Info("job under memory pressure; it was notified", "job_id", id, "cause", cause)
		return
	}
	if j.w == nil {
		return
	}
	// The pressure began when the span the trigger held began (PSI);
	// a v1 crossing is the moment of the event.
	sent, ok := j.w.PressureStop(cause, ev.At.Add(-ev.Held))
	if !ok {
		return // not running (starting, backing off, stopping), or the run before's pressure
	}
	e.tbl.mu.Lock()
	j.pressureRestarts++
	e.tbl.mu.Unlock()
	e.log.Warn("job under memory pressure; stopping it gracefully, then its restart policy", "job_id", id, "cause", cause,
		"signal_after", sent.Sub(ev.At).Round(time.Microsecond).String())
}

// pressureCause says what an Over event saw, with its figures, as the
// job's last exit reports it.
func pressureCause(ev memwatch.Event) string {
	h := ev.Handle
	if h.Mechanism() == memwatch.Threshold {
		return fmt.Sprintf("usage %d bytes crossed memory_high %d bytes (cgroup v1 usage threshold)", ev.Usage, h.Rule().High)
	}
	return fmt.Sprintf("memory stall (PSI some) at least %g%% for %s (trigger %q; avg10 %.2f%%, total %s)",
		h.Rule().Limit, ev.Held.Round(time.Millisecond), h.Trigger(), ev.Avg10, ev.Stall.Round(time.Millisecond))
}
