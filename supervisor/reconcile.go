package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/berthd/berth/assign"
	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/limits"
	"github.com/berthd/berth/worker"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// jobsDir is where job cgroups live under the agent's root (DESIGN.md,
// "cgroup layout").
const jobsDir = "jobs"

// job is one assigned job as the agent runs it.
type job struct {
	spec  limits.Job
	res   *specs.LinuxResources
	group *cgroup.Group
	w     *worker.Worker
	// err is why the job could not be started (its cgroup could not be
	// made, its limits could not be resolved); the job is then retried.
	err string
	// holder is the member that holds the job's claim while this agent
	// waits for it; the job is retried until the claim is free.
	holder string
	// claimed is true once this agent holds the job's claim.
	claimed bool
}

// Waiting is the state of a job whose claim another member still holds.
const Waiting worker.State = "waiting"

// groupNode is a sharing group's parent cgroup, holding the group's limits.
type groupNode struct {
	name   string
	limits limits.Limits
	res    *specs.LinuxResources
	group  *cgroup.Group
}

// cgroupRel is the job's cgroup path relative to the agent's root.
func cgroupRel(j limits.Job) string {
	if j.Group != "" {
		return path.Join(jobsDir, groupDir(j.Group), j.ID)
	}
	return path.Join(jobsDir, j.ID)
}

func groupDir(name string) string { return "g-" + name }

// reconcile makes the running jobs match the source's assignment and the
// configuration in force: stop what is no longer assigned, restart what
// changed in a way that needs a new process, update limits in place, start
// what is missing.
//
// With retryFailed (a reload), jobs whose command could not be started are
// tried again: the operator may have fixed what was missing.
func (a *Agent) reconcile(ctx context.Context, retryFailed ...bool) {
	retry := len(retryFailed) > 0 && retryFailed[0]
	desired, err := a.source.Desired(ctx)
	if err != nil {
		a.log.Error("read assignment", "error", err)
		return
	}
	a.mu.RLock()
	cfg := a.cfg
	a.mu.RUnlock()

	defs := map[string]limits.Job{}
	if desired.Workload != nil {
		for _, j := range desired.Workload.Jobs(cfg.Agent.StopTimeout) {
			defs[j.ID] = j
		}
	}
	want := map[string]limits.Job{}
	for _, id := range desired.Jobs {
		if j, ok := defs[id]; ok {
			want[id] = j
		}
	}

	// Stop removed and respawn-needing jobs, all at once.
	var stop []*job
	a.mu.RLock()
	for id, j := range a.jobs {
		nj, ok := want[id]
		if !ok || needsRestart(j.spec, nj) || (retry && j.w != nil && j.w.Status().State == worker.Failed) {
			stop = append(stop, j)
		}
	}
	a.mu.RUnlock()
	a.stopJobs(stop, cfg.Agent.StopTimeout)

	// Group nodes first: a job's cgroup lives inside its group's.
	a.reconcileGroups(desired.Workload, want)

	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		nj := want[id]
		a.mu.RLock()
		cur := a.jobs[id]
		a.mu.RUnlock()
		switch {
		case cur == nil:
			a.startJob(ctx, cfg, nj)
		case cur.err != "" || cur.holder != "":
			a.startJob(ctx, cfg, nj) // replaces cur
		default:
			a.updateJob(cur, nj)
		}
	}

	a.removeUnusedGroups(want)
	keep := map[string]bool{}
	for id := range want {
		keep[id] = true
	}
	a.metrics.retain(keep)
	a.mu.Lock()
	a.desired = desired
	a.mu.Unlock()
}

// needsRestart reports whether going from old to new needs a new process
// (and a new cgroup): anything but the limits changed, or a limit was
// removed. A limit that is added or changed is written in place; a removed
// one has no value to write that means "as if never set" in every
// controller (v1 pids.max, blkio throttles, cpuset), so the job's cgroup is
// made anew.
func needsRestart(old, new limits.Job) bool {
	o, n := old.Process, new.Process
	o.Limits, n.Limits = limits.Limits{}, limits.Limits{}
	return old.Group != new.Group || !reflect.DeepEqual(o, n) || limitsRemoved(old.Process.Limits, new.Process.Limits)
}

// limitsRemoved reports whether a limit set in old is unset in new.
func limitsRemoved(old, new limits.Limits) bool {
	gone := func(o, n bool) bool { return o && !n }
	if gone(old.CPU > 0, new.CPU > 0) || gone(old.CPUWeight > 0, new.CPUWeight > 0) ||
		gone(old.Cpuset != "", new.Cpuset != "") || gone(old.Memory > 0, new.Memory > 0) ||
		gone(old.MemoryHigh > 0, new.MemoryHigh > 0) || gone(old.MemorySwap > 0, new.MemorySwap > 0) ||
		gone(old.Pids > 0, new.Pids > 0) || gone(old.IOWeight > 0, new.IOWeight > 0) {
		return true
	}
	rates := func(l limits.Limits) map[string][4]bool {
		m := map[string][4]bool{}
		for _, io := range l.IO {
			m[io.Device] = [4]bool{io.ReadBPS > 0, io.WriteBPS > 0, io.ReadIOPS > 0, io.WriteIOPS > 0}
		}
		return m
	}
	nr := rates(new)
	for dev, o := range rates(old) {
		n := nr[dev]
		for i := range o {
			if gone(o[i], n[i]) {
				return true
			}
		}
	}
	return false
}

func (a *Agent) reconcileGroups(wl *limits.Workload, want map[string]limits.Job) {
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
			if limitsRemoved(cur.limits, g.Limits) {
				a.log.Warn("a limit was removed from a sharing group: it stays in force until the group's jobs are all stopped and its cgroup is made anew", "group", g.Name)
			}
			cur.limits = g.Limits
			if !reflect.DeepEqual(cur.res, res) {
				if err := cur.group.Update(res); err != nil {
					a.log.Error("update group cgroup", "group", g.Name, "error", err)
					continue
				}
				cur.res = res
				a.log.Info("group limits updated in place", "group", g.Name)
			}
			continue
		}
		cg, err := a.hier.New(path.Join(jobsDir, groupDir(g.Name)), res)
		if err != nil {
			a.log.Error("create group cgroup", "group", g.Name, "error", err)
			continue
		}
		a.mu.Lock()
		a.groups[g.Name] = &groupNode{name: g.Name, res: res, limits: g.Limits, group: cg}
		a.mu.Unlock()
	}
}

func (a *Agent) removeUnusedGroups(want map[string]limits.Job) {
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

// startJob takes the job's claim (in a cluster), makes its cgroup with its
// limits and starts its worker in it. A claim held by another member leaves
// the job waiting; a failure is recorded on the job (state "failed"). Both
// are retried later; neither stops the agent.
func (a *Agent) startJob(ctx context.Context, cfg *limits.Config, j limits.Job) {
	a.fenceMu.RLock()
	defer a.fenceMu.RUnlock()
	nj := &job{spec: j}
	if c, ok := a.source.(Claimer); ok {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		got, holder, err := c.Claim(cctx, j.ID)
		cancel()
		switch {
		case err != nil:
			nj.holder = "?"
			nj.err = fmt.Sprintf("claim: %v", err)
		case !got:
			nj.holder = holder
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
			a.mu.Unlock()
			if prev == nil || prev.holder != nj.holder {
				a.log.Info("job waits for its claim", "job_id", j.ID, "holder", nj.holder, "error", nj.err)
			}
			return
		}
	}
	res, notes, err := j.Process.Limits.Resources(nil)
	for _, n := range notes {
		a.log.Info("job limits", "job_id", j.ID, "note", n)
	}
	if err == nil {
		nj.res = res
		nj.group, err = a.hier.New(cgroupRel(j), res)
	}
	if err != nil {
		nj.err = fmt.Sprintf("create cgroup: %v", err)
		a.log.Error("start job", "job_id", j.ID, "error", err)
		a.mu.Lock()
		a.jobs[j.ID] = nj
		a.mu.Unlock()
		return
	}
	nj.w = worker.New(a.workerSpec(cfg, j, nj.group, a.cgroupPath(j)))
	a.mu.Lock()
	a.jobs[j.ID] = nj
	a.mu.Unlock()
	nj.w.Start()
	a.log.Info("job starting", "job_id", j.ID, "cgroup", a.cgroupPath(j))
}

// fenceAll kills every worker at once, without grace, and forgets every
// job: the agent's membership can no longer be proven, so another member
// may soon claim its jobs (DESIGN.md, "fencing"). It kills first, without
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
			if a.jobs[j.spec.ID] == j {
				delete(a.jobs, j.spec.ID)
			}
			a.mu.Unlock()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// cgroupPath is the job's cgroup as /proc/PID/cgroup names it.
func (a *Agent) cgroupPath(j limits.Job) string {
	return path.Join("/", a.hier.Root(), cgroupRel(j))
}

func (a *Agent) workerSpec(cfg *limits.Config, j limits.Job, g *cgroup.Group, cgPath string) worker.Spec {
	stop := cfg.Agent.StopTimeout
	if j.Process.StopTimeout > 0 {
		stop = j.Process.StopTimeout
	}
	var out io.Writer = a.jobLog(cfg, j.ID)
	if js := journalSink(cfg, j.ID); js != nil {
		out = io.MultiWriter(out, js)
	}
	return worker.Spec{
		JobID:       j.ID,
		Path:        j.Process.Command[0],
		Args:        j.Process.Command,
		Env:         j.Env(cgPath),
		Dir:         j.Process.Dir,
		User:        j.Process.User,
		Restart:     worker.Policy(j.Process.Restart),
		StopTimeout: stop,
		Group:       g,
		Log:         out,
		OnChange:    a.logTransitions(j.ID),
	}
}

// jobLog is the job's rotating log file, <log_dir>/<job_id>.log. One writer
// per job ID serves every worker the job ever has in this agent's life: the
// rotation library keeps a goroutine per writer even after Close, so making
// a new one per worker would leak one each time a job is restarted anew.
func (a *Agent) jobLog(cfg *limits.Config, id string) io.Writer {
	a.logsMu.Lock()
	defer a.logsMu.Unlock()
	if a.logs == nil {
		a.logs = map[string]io.WriteCloser{}
	}
	w, ok := a.logs[id]
	if !ok {
		w = worker.LogConfig{
			Path:     path.Join(cfg.Agent.LogDir, id+".log"),
			MaxBytes: cfg.Agent.LogMaxSize,
			MaxFiles: cfg.Agent.LogMaxFiles,
		}.Open()
		a.logs[id] = w
	}
	return w
}

// closeLogs closes every job log file (at agent stop).
func (a *Agent) closeLogs() {
	a.logsMu.Lock()
	defer a.logsMu.Unlock()
	for id, w := range a.logs {
		_ = w.Close()
		delete(a.logs, id)
	}
}

// logTransitions logs a worker's state changes in the agent's own log, one
// line per event, so that `journalctl -u berth` tells what happened to
// every job without reading its output.
func (a *Agent) logTransitions(id string) func(worker.Status) {
	return func(st worker.Status) {
		switch st.State {
		case worker.Running:
			a.log.Info("job running", "job_id", id, "pid", st.PID, "restarts", st.Restarts)
		case worker.Failed:
			a.log.Error("job failed to start; it is retried on reload or when its definition changes", "job_id", id, "reason", st.Reason)
		case worker.Exited:
			a.log.Warn("job exited; its restart policy does not restart it", "job_id", id, "exit", st.LastExit.Reason)
		case worker.BackingOff:
			a.log.Warn("job exited; restarting", "job_id", id, "exit", st.LastExit.Reason,
				"oom_killed", st.LastExit.OOMKilled, "restart_at", st.NextRestart.Format(time.RFC3339Nano))
		}
	}
}

// journalSink is where a job's output goes besides its file: the systemd
// journal when log_sink = "journal", else nowhere.
func journalSink(cfg *limits.Config, id string) io.Writer {
	if cfg.Agent.LogSink == "journal" {
		return &worker.JournalWriter{JobID: id}
	}
	return nil
}

// updateJob applies changed limits in place: the process keeps running.
func (a *Agent) updateJob(cur *job, nj limits.Job) {
	res, notes, err := nj.Process.Limits.Resources(nil)
	if err != nil {
		a.log.Error("job limits", "job_id", nj.ID, "error", err)
		return
	}
	if !reflect.DeepEqual(cur.res, res) {
		for _, n := range notes {
			a.log.Info("job limits", "job_id", nj.ID, "note", n)
		}
		if err := cur.group.Update(res); err != nil {
			a.log.Error("update job cgroup; old limits stay", "job_id", nj.ID, "error", err)
			return
		}
		a.log.Info("job limits updated in place", "job_id", nj.ID)
	}
	a.mu.Lock()
	cur.res, cur.spec = res, nj
	a.mu.Unlock()
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
	// (DESIGN.md rule 7). A failed stop keeps the claim until the lease
	// ends: never two workers for one job.
	if c, ok := a.source.(Claimer); ok && j.claimed && err == nil {
		if rerr := c.Release(ctx, j.spec.ID); rerr != nil {
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
}

func (a *Agent) needsRetry() bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, j := range a.jobs {
		if j.err != "" || j.holder != "" {
			return true
		}
	}
	return false
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
	if cerr := a.hier.Cleanup(ctx, jobsDir); cerr != nil {
		err = errors.Join(err, fmt.Errorf("remove %s: %w", jobsDir, cerr))
	}
	// Leave no cgroup behind: the root too, unless it is the cgroup systemd
	// delegated to the agent (which systemd owns).
	if rerr := a.hier.Remove(ctx); rerr != nil {
		err = errors.Join(err, rerr)
	}
	return err
}

// memberOf is the agent's own member record: its [static] declarations.
func memberOf(cfg *limits.Config) assign.Member {
	return assign.Member{
		ID:         cfg.Agent.ID,
		Protocol:   assign.Protocol(cfg.Cluster.Protocol),
		Connectors: cfg.Static.Connectors,
		Tasks:      cfg.Static.Tasks,
	}
}

// connectorsOf is the workload as assignment sees it.
func connectorsOf(wl *limits.Workload) []assign.Connector {
	out := make([]assign.Connector, 0, len(wl.Connectors))
	for _, c := range wl.Connectors {
		out = append(out, assign.Connector{Name: c.Name, Run: c.Run != nil, Tasks: c.Tasks, Group: c.Group})
	}
	return out
}

func modeName(m cgroup.Mode) string {
	switch m {
	case cgroup.Legacy:
		return "legacy"
	case cgroup.Hybrid:
		return "hybrid"
	case cgroup.Unified:
		return "unified"
	}
	return "unavailable"
}
