package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/cgroup/memwatch"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/fencing"
	"github.com/berthd/berth/host"
	"github.com/berthd/berth/internal/retry"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/supervisor/plan"
	"github.com/berthd/berth/worker"
	"github.com/jonboulle/clockwork"
)

// This file acts: the executor carries out the plans Decide makes, on real
// cgroups and workers, and records the outcome in the table.

// executor makes, updates and removes jobs' cgroups and workers.
type executor struct {
	log     *slog.Logger
	host    *host.Host
	rt      *worker.Runtime
	spawner worker.Spawner      // nil: runs start on rt's launcher threads
	notes   worker.BackoffNotes // nil: restart waits are not recorded
	// tokens records the fencing tokens handed out; nil: runs get none.
	// claimFile is the claim file runs read; nil: none (tokens.go).
	tokens    *fencing.Record
	claimFile *fencing.ClaimFile
	// inherited is what an earlier agent left, until the first pass that
	// hands it over (reconcile); only the loop's goroutine touches it.
	inherited plan.Inherited
	adopted   atomic.Int64 // runs taken over (Agent.Adopted)
	clock     clockwork.Clock
	hier      *cgroup.Hierarchy
	source    source.Source
	tbl       *table

	// fenceMu orders fencing against starting jobs: a start (claim, then
	// worker) holds it shared; fencing holds it exclusively, so that no
	// worker starts after a fence began.
	fenceMu sync.RWMutex
	fencing atomic.Bool // a fence is in progress: no new worker may start

	logs     worker.JobLogs
	envFiles config.EnvFiles // the env_files' values, read on this host

	// mem watches the memory pressure of the jobs that have an action
	// (pressure.go); nil when it could not start (memErr says why).
	mem    *memwatch.Watcher
	memErr error

	// settle checks adopted jobs' limits after the pass (settle.go).
	settle settler
	// adoptGate is closed when startJobs has handed every run it adopts
	// to its worker (worker.Spec.AdoptAfter); set by startJobs, which
	// only the loop's goroutine calls.
	adoptGate chan struct{}
}

// wanted is the assignment's jobs that have a definition, by ID.
func wanted(d source.Desired, defaults spec.ProcessDefaults) map[string]spec.Job {
	want := map[string]spec.Job{}
	if d.Workload == nil {
		return want
	}
	defs := map[string]spec.Job{}
	for _, j := range d.Workload.JobsWithDefaults(defaults) {
		defs[j.ID] = j
	}
	for _, id := range d.Jobs {
		if j, ok := defs[id]; ok {
			want[id] = j
		}
	}
	return want
}

// reconcile makes the running jobs match desired and the configuration in
// force: it reads the table, lets Decide plan the pass and carries the plan
// out. With retryFailed (a reload) every failed job is tried again. With
// handOver (desired is the whole assignment, or none came in time) the
// pass also decides what an earlier agent left, if that is not done yet:
// every inherited run and wait is adopted, resumed or discarded.
func (e *executor) reconcile(ctx context.Context, cfg *config.Config, desired source.Desired, retryFailed, handOver bool) {
	e.settle.wait() // no pass updates limits an adoption's check is writing
	want := wanted(desired, cfg.Agent.ProcessDefaults())
	in := plan.Input{Want: want, Targets: desired.Targets, Restarts: desired.Restarts,
		EnvErrs: e.resolveEnvFiles(want), RetryFailed: retryFailed, CanStart: e.host.CheckJob}
	in.Current, in.Handled = e.tbl.current(e.clock.Now())
	if handOver && e.inheriting() {
		in.Inherited, in.Fingerprint = e.inherited, func(j spec.Job) string { return e.fingerprint(cfg, j) }
		e.inherited = plan.Inherited{}
	}
	p := plan.Decide(in)
	e.execute(ctx, cfg, desired, want, p)
}

// inheriting reports whether what an earlier agent left is still to be
// handed over.
func (e *executor) inheriting() bool { return !e.inherited.Empty() }

// execute carries out plan p, in its order: hold the blocked jobs' reasons,
// stop (all at once), discard what an earlier agent left and no job
// takes, release again the claims whose release failed (retryReleases),
// make the sharing groups' cgroups, hold, start, adopt and resume
// (claims in batches, then cgroups and workers), update in place, remove
// unused group cgroups, then log and remove the handled restart requests.
func (e *executor) execute(ctx context.Context, cfg *config.Config, desired source.Desired, want map[string]spec.Job, p plan.Plan) {
	blocked := map[string]bool{}
	for _, b := range p.Block {
		blocked[b.ID] = true
		if j := e.tbl.get(b.ID); j != nil {
			e.block(j, b.New, b.Err)
		}
	}
	for _, j := range e.tbl.all() {
		if !blocked[j.spec.ID] {
			e.unblock(j)
		}
	}
	var stop []*job
	for _, s := range p.Stop {
		j := e.tbl.get(s.ID)
		if j == nil {
			continue
		}
		switch s.Reason {
		case plan.StopChanged:
			e.log.Info("job definition changed; restarting it", "job_id", s.ID, "changes", changeList(config.DiffJobs(j.spec, s.New)))
			// The old process is stopped as the new definition says, as
			// systemd applies KillMode=, KillSignal= and TimeoutStopSec=
			// at daemon-reload, before the restart.
			np := s.New.Process
			if j.w != nil {
				j.w.Retune(np.Restart, np.StopTimeout, np.KillMode, np.KillSignal.Number())
			}
			e.tbl.mu.Lock()
			j.spec.Process.StopTimeout = np.StopTimeout
			e.tbl.mu.Unlock()
		case plan.StopRequested:
			e.tbl.mu.Lock()
			j.move(plan.Restarting)
			e.tbl.mu.Unlock()
		}
		stop = append(stop, j)
	}
	_ = e.stopJobs(stop, cfg.Agent.StopTimeout)
	e.discard(ctx, p.Discard)
	starting := map[string]bool{}
	for _, l := range launches(p) {
		starting[l.job.ID] = true
	}
	e.retryReleases(ctx, starting)

	run := map[string]spec.Job{} // the wanted jobs that may run
	for id, j := range want {
		if _, held := p.Held[id]; !held {
			run[id] = j
		}
	}
	// Group nodes first: a job's cgroup lives inside its group's.
	e.reconcileGroups(desired.Workload, run, p.InheritedGroups)
	for _, h := range p.Hold {
		e.hold(h.Job, h.Target)
	}
	for _, f := range p.EnvFailed {
		e.envFailed(e.tbl.get(f.Job.ID), f.Job, f.Err)
	}
	e.startJobs(ctx, cfg, launches(p))
	e.settleAdopted(ctx)
	for _, nj := range p.Update {
		if cur := e.tbl.get(nj.ID); cur != nil {
			e.updateJob(cur, nj)
		}
	}
	e.removeUnusedGroups(run)
	e.finishActions(ctx, desired, want, p)

	e.tbl.mu.Lock()
	e.tbl.retries.Keep(func(id string) bool { _, ok := want[id]; return ok })
	assigned := make(map[string]bool, len(want))
	for id := range want {
		assigned[id] = true
	}
	e.tbl.desired, e.tbl.assigned = desired, assigned
	e.tbl.mu.Unlock()
}

// block keeps job j running its previous definition because nj cannot
// start on this host (err), reports why (log once per reason, status,
// berth_job_update_blocked) and checks again with backoff: the missing
// user, program or directory may appear without any change of definition.
func (e *executor) block(j *job, nj spec.Job, err error) {
	msg := fmt.Sprintf("new definition cannot start on this host, the previous one keeps running: %v", err)
	e.tbl.mu.Lock()
	changed := j.blocked != msg
	j.blocked = msg
	e.tbl.retries.Failed(j.spec.ID, retry.Store(), e.clock.Now())
	e.tbl.mu.Unlock()
	if changed {
		e.log.Error("job keeps its previous definition: the new one cannot start on this host", "job_id", j.spec.ID,
			"error", err, "changes", changeList(config.DiffJobs(j.spec, nj)))
	}
}

// unblock clears a block of job j (its definition can start now, or is
// the running one again) and its re-check backoff.
func (e *executor) unblock(j *job) {
	e.tbl.mu.Lock()
	defer e.tbl.mu.Unlock()
	if j.blocked != "" {
		j.blocked = ""
		if j.phase == plan.Running && j.refused == "" {
			e.tbl.retries.Forget(j.spec.ID)
		}
	}
}

// changeList formats changes for one log attribute: "k: a → b; k2: c → d".
func changeList(cs []config.Change) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, "; ")
}

// cgroupPath is the job's cgroup as /proc/PID/cgroup names it.
func (e *executor) cgroupPath(j spec.Job) string {
	return path.Join("/", e.hier.Root(), cgroup.JobRel(j.ID, j.Group))
}

// permanent reports whether a cgroup error cannot heal by waiting: the
// kernel refused a value (EINVAL, ERANGE) or a device does not exist.
func permanent(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ERANGE) || errors.Is(err, syscall.ENODEV)
}
