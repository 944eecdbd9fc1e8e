package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/internal/retry"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/worker"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// job is one assigned job as the agent runs it.
type job struct {
	spec  config.Job
	res   *specs.LinuxResources
	group *cgroup.Group
	w     *worker.Worker
	// err is why the job could not be started (its cgroup could not be
	// made, its limits could not be resolved, its claim could not be
	// taken); permanent says the error cannot heal by waiting (the kernel
	// refused a value): the job is then retried only on reload or when its
	// definition changes, else with backoff.
	err       string
	permanent bool
	// holder is the member that holds the job's claim while this agent
	// waits for it; the job is retried with backoff until the claim is free.
	holder string
	// claimed is true once this agent holds the job's claim.
	claimed bool
	// held is the target state of the job's connector while it keeps the
	// job from running here (paused or stopped), "" otherwise; a held job
	// has no worker, no cgroup and no claim. heldBy and heldAt say who set
	// it and when.
	held   config.TargetState
	heldBy string
	heldAt time.Time
	// restarting is set while the job is stopped to carry out a restart
	// request; a new job replaces it.
	restarting bool
	// blocked is why the job's new definition cannot start on this host
	// (its user, program or working directory is missing): the running
	// worker keeps the previous definition meanwhile. "" when none.
	blocked string
	// refused names the limits of the job's definition that the kernel
	// refused to write in place (key, value, error; "; " between them):
	// the others are in force, these are tried again at every reconcile.
	// "" when none.
	refused string
}

// groupNode is a sharing group's parent cgroup, holding the group's limits.
type groupNode struct {
	name   string
	limits limits.Limits
	res    *specs.LinuxResources
	group  *cgroup.Group
}

// cgroupRel is the job's cgroup path relative to the agent's root
// (cgroup.JobRel: jobs and groups in separate subtrees, one-to-one).
func cgroupRel(j config.Job) string { return cgroup.JobRel(j.ID, j.Group) }

// reconcile makes the running jobs match the source's assignment and the
// configuration in force: stop what is no longer assigned, restart what
// changed in a way that needs a new process, update limits in place, start
// what is missing, and try again the jobs whose start failed for a reason
// that may have passed (when their backoff is due). It also carries out
// the operators' actions (actions.go): a job of a paused or stopped
// connector is stopped and held, one whose connector runs again is
// started, and a requested restart stops and starts its job once.
//
// With retryFailed (a reload), every job whose start failed is tried again,
// permanent failures included: the operator may have fixed what was
// missing.
func (a *Agent) reconcile(ctx context.Context, retryFailed bool) {
	desired := a.source.Desired()
	a.mu.RLock()
	cfg := a.cfg
	a.mu.RUnlock()

	defs := map[string]config.Job{}
	if desired.Workload != nil {
		for _, j := range desired.Workload.Jobs(cfg.Agent.StopTimeout) {
			defs[j.ID] = j
		}
	}
	want := map[string]config.Job{}
	for _, id := range desired.Jobs {
		if j, ok := defs[id]; ok {
			want[id] = j
		}
	}

	envErrs := a.resolveEnvFiles(want)

	// Operator actions: jobs held by a paused or stopped connector, restart
	// requests to carry out now.
	acts := a.planActions(desired, want)
	run := map[string]config.Job{} // the wanted jobs that may run
	for id, j := range want {
		if _, held := acts.held[id]; !held {
			run[id] = j
		}
	}

	// Stop removed, respawn-needing, newly held and restarting jobs, all
	// at once. A running job whose new definition cannot start here (its
	// user, program or working directory is missing) is not stopped: it
	// keeps running its previous definition, and the reason is reported,
	// until the new one can start (a requested restart waits for that
	// too). A paused or stopped connector's job is stopped whatever its
	// definition.
	var stop []*job
	keepOld := map[string]bool{}
	a.mu.RLock()
	current := make([]*job, 0, len(a.jobs))
	for _, j := range a.jobs {
		current = append(current, j)
	}
	a.mu.RUnlock()
	sort.Slice(current, func(i, k int) bool { return current[i].spec.ID < current[k].spec.ID })
	for _, j := range current {
		id := j.spec.ID
		nj, ok := want[id]
		_, hold := acts.held[id]
		restart := ok && needsRestart(j.spec, nj)
		if restart && !hold && j.live() {
			if err := a.host.CheckJob(nj); err != nil {
				keepOld[id] = true
				delete(acts.restart, id)
				a.holdJob(j, nj, err)
				continue
			}
		}
		a.unholdJob(j)
		_, requested := acts.restart[id]
		if !ok || restart || (retryFailed && j.w != nil && j.w.Status().State == worker.Failed) ||
			(hold && j.held == "") || requested {
			if ok && restart && j.held == "" {
				a.log.Info("job definition changed; restarting it", "job_id", id, "changes", changeList(config.DiffJobs(j.spec, nj)))
			}
			a.mu.Lock()
			j.restarting = requested
			a.mu.Unlock()
			stop = append(stop, j)
		}
	}
	_ = a.stopJobs(stop, cfg.Agent.StopTimeout)

	// Group nodes first: a job's cgroup lives inside its group's.
	a.reconcileGroups(desired.Workload, run)

	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	now := a.clock.Now()
	var start []config.Job
	for _, id := range ids {
		if keepOld[id] {
			continue // runs its previous definition
		}
		nj := want[id]
		if t, held := acts.held[id]; held {
			a.hold(nj, t)
			continue
		}
		a.mu.RLock()
		cur := a.jobs[id]
		due := a.retryDue(id, now)
		a.mu.RUnlock()
		switch {
		case envErrs[id] != nil:
			a.envFailed(cur, nj, envErrs[id])
		case cur == nil || cur.held != "":
			start = append(start, nj)
		case cur.err != "" || cur.holder != "":
			if retryFailed || (!cur.permanent && due) || !sameDefinition(cur.spec, nj) {
				start = append(start, nj) // replaces cur
			}
		default:
			a.updateJob(cur, nj)
		}
	}
	a.startJobs(ctx, cfg, start)

	a.removeUnusedGroups(run)
	a.finishActions(ctx, desired, want, acts)
	keep := make(map[string]bool, len(want))
	for id := range want {
		keep[id] = true
	}
	a.mu.Lock()
	for id := range a.retries {
		if !keep[id] {
			delete(a.retries, id)
		}
	}
	a.desired, a.assigned = desired, keep
	a.mu.Unlock()
}

// live reports whether the job's worker is running (or starting): an
// instance worth keeping when its replacement cannot start.
func (j *job) live() bool {
	if j.w == nil {
		return false
	}
	st := j.w.Status().State
	return st == worker.Running || st == worker.Starting
}

// holdJob keeps job j running its previous definition because nj cannot
// start on this host (err), reports why (log once per reason, status,
// berth_job_update_blocked) and checks again with backoff: the missing
// user, program or directory may appear without any change of definition.
func (a *Agent) holdJob(j *job, nj config.Job, err error) {
	msg := fmt.Sprintf("new definition cannot start on this host, the previous one keeps running: %v", err)
	a.mu.Lock()
	changed := j.blocked != msg
	j.blocked = msg
	a.failedTransiently(j.spec.ID, retry.Store())
	a.mu.Unlock()
	if changed {
		a.log.Error("job keeps its previous definition: the new one cannot start on this host", "job_id", j.spec.ID,
			"error", err, "changes", changeList(config.DiffJobs(j.spec, nj)))
	}
}

// unholdJob clears a hold of job j (its definition can start now, or is
// the running one again) and its re-check backoff.
func (a *Agent) unholdJob(j *job) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if j.blocked != "" {
		j.blocked = ""
		if j.err == "" && j.holder == "" {
			delete(a.retries, j.spec.ID)
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

// sameDefinition reports whether a job's definition is unchanged.
func sameDefinition(old, new config.Job) bool { return reflect.DeepEqual(old, new) }

// needsRestart reports whether going from old to new needs a new process
// (and a new cgroup): anything but the limits changed, or a limit was
// removed. A limit that is added or changed is written in place; a removed
// one has no value to write that means "as if never set" in every
// controller (v1 pids.max, blkio throttles, cpuset), so the job's cgroup is
// made anew.
//
// The restart policy and the stop timeout do not touch the running
// process either: they are handed to its worker (worker.Retune) and take
// effect at its next exit or stop, as systemd applies Restart= and
// TimeoutStopSec= on daemon-reload. Everything else of the process
// (command, environment, env_file, user, working directory) needs a new
// one.
func needsRestart(old, new config.Job) bool {
	o, n := old.Process, new.Process
	o.Limits, n.Limits = limits.Limits{}, limits.Limits{}
	o.Restart, n.Restart = "", ""
	o.StopTimeout, n.StopTimeout = 0, 0
	return old.Group != new.Group || !reflect.DeepEqual(o, n) || limits.Removed(old.Process.Limits, new.Process.Limits)
}

func (a *Agent) reconcileGroups(wl *config.Workload, want map[string]config.Job) {
	used := map[string]bool{}
	for _, j := range want {
		if j.Group != "" {
			used[j.Group] = true
		}
	}
	if wl == nil {
		return
	}
	for _, g := range wl.Groups {
		if !used[g.Name] {
			continue
		}
		res, notes, err := g.Limits.Resources(nil)
		for _, n := range notes {
			a.log.Info("group limits", "group", g.Name, "note", n)
		}
		if err != nil {
			a.log.Error("group limits", "group", g.Name, "error", err)
			continue
		}
		a.mu.RLock()
		cur := a.groups[g.Name]
		a.mu.RUnlock()
		if cur != nil {
			if limits.Removed(cur.limits, g.Limits) {
				a.log.Warn("a limit was removed from a sharing group: it stays in force until the group's jobs are all stopped and its cgroup is made anew", "group", g.Name)
			}
			a.mu.Lock()
			old := cur.limits
			cur.limits = g.Limits
			a.mu.Unlock()
			if !reflect.DeepEqual(cur.res, res) {
				if err := cur.group.Update(res); err != nil {
					a.log.Error("update group cgroup", "group", g.Name, "error", err)
					continue
				}
				cur.res = res
				a.log.Info("group limits updated in place", "group", g.Name,
					"changes", changeList(config.DiffJobs(config.Job{Process: config.Process{Limits: old}}, config.Job{Process: config.Process{Limits: g.Limits}})))
			}
			continue
		}
		cg, err := a.hier.New(cgroup.GroupRel(g.Name), res)
		if err != nil {
			a.log.Error("create group cgroup", "group", g.Name, "error", err)
			continue
		}
		a.mu.Lock()
		a.groups[g.Name] = &groupNode{name: g.Name, res: res, limits: g.Limits, group: cg}
		a.mu.Unlock()
	}
}

func (a *Agent) removeUnusedGroups(want map[string]config.Job) {
	used := map[string]bool{}
	for _, j := range want {
		used[j.Group] = true
	}
	a.mu.RLock()
	var drop []*groupNode
	for name, g := range a.groups {
		if !used[name] {
			drop = append(drop, g)
		}
	}
	a.mu.RUnlock()
	for _, g := range drop {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := g.group.Delete(ctx)
		cancel()
		if err != nil {
			a.log.Error("remove group cgroup", "group", g.name, "error", err)
			continue
		}
		a.mu.Lock()
		delete(a.groups, g.name)
		a.mu.Unlock()
	}
}

// startParallel bounds how many jobs startJobs makes cgroups for and
// hands to their workers at once: enough to keep both the kernel (cgroup
// directories, limit files) and the launcher threads busy while one start
// waits on the other, few enough that a thousand starts do not become a
// thousand goroutines.
func startParallel() int { return max(8, 4*runtime.GOMAXPROCS(0)) }

// claimTimeout bounds each store transaction of the claims of a start.
const claimTimeout = 5 * time.Second

// startJobs takes the claims of js in as few store transactions as the
// store allows (Source.ClaimMany), then starts the claimed jobs,
// startParallel at a time (startJob). A claim held by another member
// leaves its job waiting; a claim that could not be taken (the store
// failed) is retried with backoff.
func (a *Agent) startJobs(ctx context.Context, cfg *config.Config, js []config.Job) {
	if len(js) == 0 {
		return
	}
	a.fenceMu.RLock()
	defer a.fenceMu.RUnlock()
	ids := make([]string, len(js))
	for i, j := range js {
		ids[i] = j.ID
	}
	txns := (len(ids) + 126) / 127
	cctx, cancel := context.WithTimeout(ctx, time.Duration(txns)*claimTimeout)
	won, held, err := a.source.ClaimMany(cctx, ids)
	cancel()
	ours := make(map[string]bool, len(won))
	for _, id := range won {
		ours[id] = true
	}
	sem := make(chan struct{}, startParallel())
	var wg sync.WaitGroup
	for _, j := range js {
		c := claim{got: ours[j.ID], holder: held[j.ID]}
		if !c.got && c.holder == "" {
			c.err = err
			if c.err == nil {
				c.err = errors.New("the store answered for neither")
			}
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			a.startJob(ctx, cfg, j, c)
		}()
	}
	wg.Wait()
}

// claim is what startJobs learned of one job's claim.
type claim struct {
	got    bool   // this agent holds it
	holder string // another member holds it
	err    error  // it could not be taken
}

// startJob makes the job's cgroup with its limits and starts its worker in
// it, once startJobs has tried its claim (c). A claim held by another
// member leaves the job waiting; a failure is recorded on the job (state
// "failed"). A transient failure (the store, a busy kernel) is retried
// with backoff; a permanent one (the kernel refuses a limit, a device is
// gone) only on reload or when the definition changes. Neither stops the
// agent. The caller holds fenceMu shared.
func (a *Agent) startJob(ctx context.Context, cfg *config.Config, j config.Job, c claim) {
	nj := &job{spec: j}
	switch {
	case c.err != nil:
		nj.holder = "?"
		nj.err = fmt.Sprintf("claim: %v", c.err)
	case !c.got:
		nj.holder = c.holder
	default:
		nj.claimed = true
	}
	if nj.claimed && a.fencing.Load() {
		return // fencing: the claim goes with the lease
	}
	if !nj.claimed {
		a.mu.Lock()
		prev := a.jobs[j.ID]
		a.jobs[j.ID] = nj
		a.failedTransiently(j.ID, retry.Claim())
		a.mu.Unlock()
		if prev == nil || prev.holder != nj.holder {
			a.log.Info("job waits for its claim", "job_id", j.ID, "holder", nj.holder, "error", nj.err)
		}
		return
	}
	res, notes, err := j.Process.Limits.Resources(nil)
	for _, n := range notes {
		a.log.Info("job limits", "job_id", j.ID, "note", n)
	}
	if err != nil {
		nj.permanent = true // the device of an io limit does not resolve
	} else {
		nj.res = res
		nj.group, err = a.hier.New(cgroupRel(j), res)
		if err != nil {
			nj.permanent = permanent(err)
			// Leave no half-made cgroup behind (failure case C16).
			if g, lerr := a.hier.Load(cgroupRel(j)); lerr == nil {
				dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
				_ = g.Delete(dctx)
				dcancel()
			}
			nj.group = nil
		}
	}
	if err != nil {
		nj.err = fmt.Sprintf("create cgroup: %v", err)
		a.mu.Lock()
		a.jobs[j.ID] = nj
		if !nj.permanent {
			a.failedTransiently(j.ID, retry.Store())
		}
		a.mu.Unlock()
		if nj.permanent {
			a.log.Error("job failed to start; it is retried on reload or when its definition changes", "job_id", j.ID, "error", err)
		} else {
			a.log.Error("job failed to start; retrying with backoff", "job_id", j.ID, "error", err)
		}
		return
	}
	nj.w = worker.New(a.workerSpec(cfg, j, nj.group, a.cgroupPath(j)))
	a.mu.Lock()
	a.jobs[j.ID] = nj
	delete(a.retries, j.ID)
	a.mu.Unlock()
	nj.w.Start()
	a.log.Info("job starting", "job_id", j.ID, "cgroup", a.cgroupPath(j))
}

// permanent reports whether a cgroup error cannot heal by waiting: the
// kernel refused a value (EINVAL, ERANGE) or a device does not exist.
func permanent(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ERANGE) || errors.Is(err, syscall.ENODEV)
}

// fenceAll kills every worker at once, without grace, and forgets every
// job: the agent's membership can no longer be proven, so another member
// may soon claim its jobs (docs/design.md, "Fencing"). It kills first, without
// waiting for anything (a start in progress may hold fenceMu while its
// claim call runs), then takes fenceMu, so that no start can slip in, and
// kills again whatever started meanwhile. It returns an error when a job's
// processes survived; the caller must then keep the lease (its claims) and
// retry.
func (a *Agent) fenceAll() error {
	a.fencing.Store(true)
	defer a.fencing.Store(false)
	kill := func() []*job {
		a.mu.RLock()
		js := make([]*job, 0, len(a.jobs))
		for _, j := range a.jobs {
			js = append(js, j)
		}
		a.mu.RUnlock()
		var wg sync.WaitGroup
		for _, j := range js {
			if j.group == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = j.group.Kill(ctx)
			}()
		}
		wg.Wait()
		return js
	}
	kill()
	a.fenceMu.Lock()
	defer a.fenceMu.Unlock()
	js := kill()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, j := range js {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if j.w != nil {
				_ = j.w.Stop(ctx) // nothing left to stop; cancels any restart
			}
			if j.group != nil {
				if err := j.group.Kill(ctx); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("kill job %s: %w", j.spec.ID, err))
					mu.Unlock()
					return // keep the job: it still has processes
				}
				_ = j.group.Delete(ctx)
			}
			a.mu.Lock()
			gone := a.jobs[j.spec.ID] == j
			if gone {
				delete(a.jobs, j.spec.ID)
			}
			a.mu.Unlock()
			if gone {
				a.logs.release(j.spec.ID)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// cgroupPath is the job's cgroup as /proc/PID/cgroup names it.
func (a *Agent) cgroupPath(j config.Job) string {
	return path.Join("/", a.hier.Root(), cgroupRel(j))
}

func (a *Agent) workerSpec(cfg *config.Config, j config.Job, g *cgroup.Group, cgPath string) worker.Spec {
	stop := cfg.Agent.StopTimeout
	if j.Process.StopTimeout > 0 {
		stop = j.Process.StopTimeout
	}
	out := a.logs.writer(cfg, j.ID, a.log)
	dir := j.Process.Dir
	if dir == "" {
		dir = "/" // as systemd's WorkingDirectory= defaults for a system service
	}
	return worker.Spec{
		JobID:       j.ID,
		Path:        j.Process.Command[0],
		Args:        j.Process.Command,
		Env:         j.Env(cgPath),
		Dir:         dir,
		User:        j.Process.User,
		Restart:     j.Process.Restart,
		StopTimeout: stop,
		Group:       g,
		Log:         out,
		OnChange:    a.logTransitions(j.ID),
	}
}

// logTransitions logs a worker's state changes in the agent's own log, one
// line per event, so that `journalctl -u berth` tells what happened to
// every job without reading its output.
//
// While the agent fences, an exit is fencing's kill, not the job's doing:
// it is logged as such (at INFO, after the fencing line that says why),
// never as a crash to restart. The worker reports it as Exited or
// BackingOff when its exit step runs before the Stop that fencing sends,
// and as Stopping then Stopped (with the exit) when the Stop's step runs
// first; either order gives one line.
func (a *Agent) logTransitions(id string) func(worker.Status) {
	var prev worker.State // the worker calls OnChange one call at a time
	return func(st worker.Status) {
		was := prev
		prev = st.State
		if a.fencing.Load() && st.LastExit != nil && (st.State == worker.Exited || st.State == worker.BackingOff ||
			st.State == worker.Stopped && was == worker.Stopping) {
			a.log.Info("job killed by fencing", "job_id", id, "exit", st.LastExit.Reason)
			return
		}
		switch st.State {
		case worker.Running:
			a.log.Info("job running", "job_id", id, "pid", st.PID, "restarts", st.Restarts)
		case worker.Failed:
			a.log.Error("job failed to start; it is retried on reload or when its definition changes", "job_id", id, "reason", st.Reason)
		case worker.Exited:
			if st.LastExit.Code == 0 {
				a.log.Info("job exited cleanly; its restart policy does not restart it", "job_id", id, "exit", st.LastExit.Reason)
			} else {
				a.log.Error("job failed: it exited and its restart policy does not restart it", "job_id", id, "exit", st.LastExit.Reason,
					"oom_killed", st.LastExit.OOMKilled)
			}
		case worker.BackingOff:
			a.log.Warn("job exited; restarting", "job_id", id, "exit", st.LastExit.Reason,
				"oom_killed", st.LastExit.OOMKilled, "restart_at", st.NextRestart.Format(time.RFC3339Nano))
		}
	}
}

// updateJob applies in place what changed without needing a new process:
// the limits (written to the job's cgroup) and the restart policy and stop
// timeout (handed to its worker). The process keeps running.
//
// A limit the kernel refuses (memory below the group's usage on cgroup v1:
// EBUSY) does not keep the others from being applied: each resource is
// then written on its own (applyLimits), the refused ones are reported
// (job.refused: the API's update_blocked, berth status,
// berth_job_update_blocked, one log line per new reason) and tried again
// at each reconcile, and with backoff meanwhile, until the kernel accepts
// them (the job's usage fell) or a later definition changes them.
func (a *Agent) updateJob(cur *job, nj config.Job) {
	if cur.w != nil && (cur.spec.Process.Restart != nj.Process.Restart || cur.spec.Process.StopTimeout != nj.Process.StopTimeout) {
		cur.w.Retune(nj.Process.Restart, nj.Process.StopTimeout)
		var o, n config.Job
		o.Process.Restart, o.Process.StopTimeout = cur.spec.Process.Restart, cur.spec.Process.StopTimeout
		n.Process.Restart, n.Process.StopTimeout = nj.Process.Restart, nj.Process.StopTimeout
		a.log.Info("job restart policy and stop timeout updated in place; they apply at its next exit or stop",
			"job_id", nj.ID, "changes", changeList(config.DiffJobs(o, n)))
	}
	res, notes, err := nj.Process.Limits.Resources(nil)
	if err != nil {
		a.log.Error("job limits", "job_id", nj.ID, "error", err)
		return
	}
	applied := cur.res
	refused := ""
	if !reflect.DeepEqual(cur.res, res) {
		a.mu.RLock()
		wasRefused := cur.refused
		a.mu.RUnlock()
		if wasRefused == "" {
			for _, n := range notes {
				a.log.Info("job limits", "job_id", nj.ID, "note", n)
			}
		}
		var refusals []string
		if err := cur.group.Update(res); err != nil {
			refusals = a.applyLimits(cur.group, res)
		}
		refused = strings.Join(refusals, "; ")
		if refused == "" {
			applied = res
			if wasRefused != "" {
				a.log.Info("job limits accepted by the kernel now; all are in force", "job_id", nj.ID, "changes", changeList(config.DiffJobs(cur.spec, nj)))
			} else {
				a.log.Info("job limits updated in place", "job_id", nj.ID, "changes", changeList(config.DiffJobs(cur.spec, nj)))
			}
		} else {
			// Some resources hold the new values, some the old: nothing
			// to compare the next definition against, so it is written
			// whatever it is (a definition going back to the old values
			// must undo the accepted part).
			applied = nil
		}
		if refused != "" && refused != wasRefused {
			a.log.Error("the kernel refused some job limits; the others are in force, the refused ones are tried again at every reconcile",
				"job_id", nj.ID, "refused", refused, "changes", changeList(config.DiffJobs(cur.spec, nj)))
		}
	}
	a.mu.Lock()
	cur.res, cur.spec, cur.refused = applied, nj, refused
	switch {
	case refused != "":
		// Try again when the job's usage may have changed, not only when
		// the source next changes.
		a.failedTransiently(nj.ID, retry.Store())
	case cur.blocked == "" && cur.err == "" && cur.holder == "":
		delete(a.retries, nj.ID)
	}
	a.mu.Unlock()
}

// applyLimits writes each resource of res to g on its own, so that one the
// kernel refuses does not keep the others out, and returns one line per
// refused resource: its key, the value asked and the kernel's error.
func (a *Agent) applyLimits(g *cgroup.Group, res *specs.LinuxResources) []string {
	var out []string
	for _, p := range resourcePieces(res) {
		if err := g.Update(p.res); err != nil {
			val, _ := json.Marshal(p.value)
			out = append(out, fmt.Sprintf("limit %s = %s refused by the kernel: %v", p.key, val, err))
		}
	}
	return out
}

// resourcePiece is one resource of a LinuxResources, alone.
type resourcePiece struct {
	key   string // the limits key it comes from
	value any    // the runtime-spec value, for the report
	res   *specs.LinuxResources
}

// resourcePieces splits res into one LinuxResources per resource (cgroup
// Update leaves a resource that is nil as it is).
func resourcePieces(res *specs.LinuxResources) []resourcePiece {
	var out []resourcePiece
	if res.Memory != nil {
		out = append(out, resourcePiece{"memory", res.Memory, &specs.LinuxResources{Memory: res.Memory}})
	}
	if res.CPU != nil {
		out = append(out, resourcePiece{"cpu", res.CPU, &specs.LinuxResources{CPU: res.CPU}})
	}
	if res.Pids != nil {
		out = append(out, resourcePiece{"pids", res.Pids, &specs.LinuxResources{Pids: res.Pids}})
	}
	if res.BlockIO != nil {
		out = append(out, resourcePiece{"io", res.BlockIO, &specs.LinuxResources{BlockIO: res.BlockIO}})
	}
	if res.HugepageLimits != nil {
		out = append(out, resourcePiece{"hugepages", res.HugepageLimits, &specs.LinuxResources{HugepageLimits: res.HugepageLimits}})
	}
	if res.Devices != nil {
		out = append(out, resourcePiece{"devices", res.Devices, &specs.LinuxResources{Devices: res.Devices}})
	}
	if res.Unified != nil {
		out = append(out, resourcePiece{"unified", res.Unified, &specs.LinuxResources{Unified: res.Unified}})
	}
	return out
}

// stopJobs stops the given jobs concurrently, removes their cgroups and
// forgets them.
func (a *Agent) stopJobs(js []*job, grace time.Duration) error {
	var wg sync.WaitGroup
	errs := make([]error, len(js))
	for i, j := range js {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = a.stopJob(j, grace)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (a *Agent) stopJob(j *job, grace time.Duration) error {
	if j.spec.Process.StopTimeout > 0 {
		grace = j.spec.Process.StopTimeout
	}
	// The worker's own stop: SIGTERM, grace, then the whole cgroup killed.
	ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
	defer cancel()
	var err error
	if j.w != nil {
		if err = j.w.Stop(ctx); err != nil {
			err = fmt.Errorf("stop job %s: %w", j.spec.ID, err)
		}
	}
	if j.group != nil {
		if derr := j.group.Delete(ctx); derr != nil {
			err = errors.Join(err, fmt.Errorf("remove cgroup of job %s: %w", j.spec.ID, derr))
		}
	}
	if err != nil {
		a.log.Error("stop job", "job_id", j.spec.ID, "error", err)
	} else {
		a.log.Info("job stopped", "job_id", j.spec.ID)
	}
	// Only once no process of the job is left may another member claim it
	// (assignment rule 7). A failed stop keeps the claim until the lease
	// ends: never two workers for one job.
	if j.claimed && err == nil {
		if rerr := a.source.Release(ctx, j.spec.ID); rerr != nil {
			a.log.Warn("release claim", "job_id", j.spec.ID, "error", rerr)
		}
	}
	a.removeJob(j.spec.ID)
	return err
}

func (a *Agent) removeJob(id string) {
	a.mu.Lock()
	delete(a.jobs, id)
	a.mu.Unlock()
	a.logs.release(id)
}

// stopAll stops every job and removes every cgroup the agent made,
// including the group nodes and the jobs directory itself.
func (a *Agent) stopAll() error {
	a.mu.RLock()
	js := make([]*job, 0, len(a.jobs))
	for _, j := range a.jobs {
		js = append(js, j)
	}
	grace := a.cfg.Agent.StopTimeout
	a.mu.RUnlock()
	err := a.stopJobs(js, grace)
	a.removeUnusedGroups(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, sub := range cgroup.Subtrees() {
		if cerr := a.hier.Cleanup(ctx, sub); cerr != nil {
			err = errors.Join(err, fmt.Errorf("remove %s: %w", sub, cerr))
		}
	}
	// Every job is gone: the lease guard may go (its leaf is under the
	// root). Not while a job's process survives: it keeps the deadline.
	if err == nil {
		err = a.releaseGuard(ctx)
	}
	// Leave no cgroup behind: the root too, unless it is the cgroup systemd
	// delegated to the agent (which systemd owns).
	if rerr := a.hier.Remove(ctx); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}
