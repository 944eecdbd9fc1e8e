package supervisor

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berthd/berth/cgroup"
	"github.com/berthd/berth/cluster"
	"github.com/berthd/berth/config"
	"github.com/berthd/berth/internal/retry"
	"github.com/berthd/berth/source"
	"github.com/berthd/berth/spec"
	"github.com/berthd/berth/supervisor/apply"
	"github.com/berthd/berth/supervisor/plan"
	"github.com/berthd/berth/worker"
)

// startParallel bounds how many jobs startJobs makes cgroups for and
// hands to their workers at once: enough to keep both the kernel (cgroup
// directories, limit files) and the launcher threads busy while one start
// waits on the other, few enough that a thousand starts do not become a
// thousand goroutines.
func startParallel() int { return max(8, 4*runtime.GOMAXPROCS(0)) }

// claimTimeout bounds each store transaction of the claims of a start.
const claimTimeout = 5 * time.Second

// claimBatch is how many claims one store transaction takes (etcd's
// default --max-txn-ops is 128).
const claimBatch = 127

// launch is one job to start: with a new run, or by adopting run or
// resuming wait (what an earlier agent left it, plan.Adopt and
// plan.Resume).
type launch struct {
	job  spec.Job
	run  *worker.Adoptable
	wait *worker.Pending
}

// launches are p's starts, adoptions and resumptions, in job ID order.
func launches(p plan.Plan) []launch {
	ls := make([]launch, 0, len(p.Start)+len(p.Adopt)+len(p.Resume))
	for _, j := range p.Start {
		ls = append(ls, launch{job: j})
	}
	for _, a := range p.Adopt {
		ls = append(ls, launch{job: a.Job, run: &a.Run})
	}
	for _, r := range p.Resume {
		ls = append(ls, launch{job: r.Job, wait: &r.Wait})
	}
	slices.SortFunc(ls, func(a, b launch) int { return strings.Compare(a.job.ID, b.job.ID) })
	return ls
}

// startJobs takes the claims of ls claimBatch at a time, one store
// transaction each (source.ClaimInBatches), hands out the fencing tokens
// of each batch's new runs in one write of the record (handTokens), and
// starts the jobs of each batch as soon as its claims are known,
// startParallel at a time (startJob), while the store takes the next
// batch's. The claim of a job that starts a new run is written even when
// it already is this agent's (a resumed session's), so that the run gets
// a token of its own; an adopted run keeps its token, and a resumed wait
// gets one when its run starts. A claim held by another member leaves its
// job Waiting; a claim that could not be taken (the store failed) is
// retried with backoff.
func (e *executor) startJobs(ctx context.Context, cfg *config.Config, ls []launch) {
	e.fenceMu.RLock()
	defer e.fenceMu.RUnlock()
	ids := make([]string, len(ls))
	fresh := make(map[string]bool, len(ls))
	for i, l := range ls {
		ids[i] = l.job.ID
		fresh[l.job.ID] = l.run == nil && l.wait == nil
	}
	renew := func(id string) bool { return fresh[id] }
	// The adopted runs' workers do their own work once every run is
	// handed over (worker.Spec.AdoptAfter).
	gate := make(chan struct{})
	e.adoptGate = gate
	defer close(gate)
	sem := make(chan struct{}, startParallel())
	var wg sync.WaitGroup
	next := 0
	for b := range source.ClaimInBatches(ctx, e.source, ids, renew, claimBatch, claimTimeout) {
		ours := make(map[string]cluster.Claimed, len(b.Won))
		for _, c := range b.Won {
			ours[c.Job] = c
		}
		batch := ls[next : next+len(b.Jobs)]
		claims := make([]claim, len(batch))
		for i, l := range batch {
			cl, got := ours[l.job.ID]
			c := claim{got: got, holder: b.Held[l.job.ID], written: cl}
			if !c.got && c.holder == "" {
				c.err = b.Err
				if c.err == nil {
					c.err = errors.New("the store answered for neither")
				}
			}
			if c.got && l.run != nil {
				c.stale = e.staleRun(l.run, cl)
			}
			claims[i] = c
		}
		e.handTokens(batch, claims)
		for i, l := range batch {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				e.startJob(ctx, cfg, l, claims[i])
			}()
		}
		next += len(b.Jobs)
	}
	wg.Wait()
}

// claim is what startJobs learned of one job's claim.
type claim struct {
	got    bool   // this agent holds it
	holder string // another member holds it
	err    error  // it could not be taken
	// written is the claim as the store wrote or read it (its revisions);
	// token the first run's fencing token, handed out from it
	// (handTokens); stale says the run to adopt ran under an earlier
	// claim of the job (its token is older than the claim): it is killed
	// and the job starts anew.
	written cluster.Claimed
	token   runToken
	stale   bool
}

// startJob makes the job's cgroup with its limits and starts its worker in
// it (a new run, the run to adopt or the wait to resume: l), once
// startJobs has tried its claim (c). A claim held by another member
// leaves the job Waiting; a failure leaves it Failed with the reason: a
// transient one (the store, a busy kernel) is retried with backoff, a
// permanent one (the kernel refuses a limit, a device is gone) only on
// reload or when the definition changes. Neither stops the agent. A run
// or wait the job does not take then is discarded: no claim of this
// agent covers it. The caller holds fenceMu shared.
func (e *executor) startJob(ctx context.Context, cfg *config.Config, l launch, c claim) {
	j := l.job
	nj := &job{spec: j}
	switch {
	case c.err != nil:
		nj.phase, nj.holder, nj.err = plan.Waiting, "?", fmt.Sprintf("claim: %v", c.err)
		nj.unsure = true // the store may have written it
	case !c.got:
		nj.phase, nj.holder = plan.Waiting, c.holder
	default:
		nj.claimed = true
	}
	if nj.claimed && e.fencing.Load() {
		e.discardLaunch(ctx, l, plan.DiscardGone)
		return // fencing: the claim goes with the lease
	}
	if nj.claimed && c.stale {
		e.discardLaunch(ctx, l, plan.DiscardOlderClaim)
		l.run = nil // a new run, whose token comes from the claim now
	}
	if !nj.claimed {
		e.discardLaunch(ctx, l, plan.DiscardGone)
		e.tbl.mu.Lock()
		prev := e.tbl.jobs[j.ID]
		e.tbl.jobs[j.ID] = nj
		e.tbl.retries.Failed(j.ID, retry.Claim(), e.clock.Now())
		e.tbl.mu.Unlock()
		if prev == nil || prev.holder != nj.holder {
			e.log.Info("job waits for its claim", "job_id", j.ID, "holder", nj.holder, "error", nj.err)
		}
		return
	}
	rel := cgroup.JobRel(j.ID, j.Group)
	settle := false // the limits are checked after the pass (settle.go)
	res, notes, err := j.Process.Limits.Resources(nil)
	for _, n := range notes {
		e.log.Info("job limits", "job_id", j.ID, "note", n)
	}
	if err != nil {
		nj.permanent = true // the device of an io limit does not resolve
	} else {
		nj.res = res
		if l.run != nil {
			// An adopted run's cgroup holds the earlier agent's limits:
			// they are checked against res after the pass (settle.go).
			if g, lerr := e.hier.Load(rel); lerr == nil {
				nj.group, settle = g, true
			}
		}
		if nj.group == nil {
			// A fresh cgroup, or an adopted run's cgroup removed from
			// outside, made again: an adopted one's limits removed from the
			// definition since are taken out.
			nj.group, err = apply.New(e.hier, e.log, rel, res, l.run != nil)
		}
		if err != nil {
			nj.permanent = permanent(err)
			// Leave no half-made cgroup behind (failure case C16).
			if g, lerr := e.hier.Load(rel); lerr == nil {
				dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
				_ = g.Delete(dctx)
				dcancel()
			}
			nj.group = nil
		}
	}
	var runEnv []string
	if err == nil {
		var werr error
		nj.watch, runEnv, werr = e.watchJob(j, nj.group)
		switch {
		case werr != nil && j.Process.MemoryPressure.Action == spec.PressureRestart:
			// A restart that cannot watch would meet the OOM killer
			// instead: the job does not start without it.
			nj.permanent = true
			dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
			_ = nj.group.Delete(dctx)
			dcancel()
			nj.group = nil
			e.discardLaunch(ctx, l, plan.DiscardNotStarted)
			nj.phase, nj.err = plan.Failed, werr.Error()
			e.tbl.mu.Lock()
			e.tbl.jobs[j.ID] = nj
			e.tbl.mu.Unlock()
			e.log.Error("job failed to start; it is retried on reload or when its definition changes", "job_id", j.ID, "error", werr)
			return
		case werr != nil:
			e.log.Warn("job runs without its memory pressure notification", "job_id", j.ID, "error", werr)
		case nj.watch != nil:
			e.log.Info("job memory pressure watched", "job_id", j.ID, "action", string(j.Process.MemoryPressure.Action),
				"mechanism", nj.watch.Mechanism().String(), "trigger", nj.watch.Trigger())
		}
	}
	if err != nil {
		e.discardLaunch(ctx, l, plan.DiscardNotStarted)
		nj.phase, nj.err = plan.Failed, fmt.Sprintf("create cgroup: %v", err)
		e.tbl.mu.Lock()
		e.tbl.jobs[j.ID] = nj
		if !nj.permanent {
			e.tbl.retries.Failed(j.ID, retry.Store(), e.clock.Now())
		}
		e.tbl.mu.Unlock()
		if nj.permanent {
			e.log.Error("job failed to start; it is retried on reload or when its definition changes", "job_id", j.ID, "error", err)
		} else {
			e.log.Error("job failed to start; retrying with backoff", "job_id", j.ID, "error", err)
		}
		return
	}
	nj.phase = plan.Running
	ws := e.workerSpec(cfg, j)
	ws.Group = nj.group
	ws.Remake = e.remake(j.ID, rel, nj.group)
	ws.RunEnv = runEnv
	ws.Token = e.tokenFunc(j.ID, c.token)
	ws.Log = e.logs.Writer(j.ID, cfg.Agent.LogDir, cfg.Agent.LogMaxSize, cfg.Agent.LogMaxFiles, cfg.Agent.LogSink == "journal", e.log)
	switch {
	case l.run != nil:
		ws.AdoptAfter = e.adoptGate
		nj.w = worker.Adopt(ws, *l.run) // its token: the run's own (staleRun)
		e.adopted.Add(1)
	case l.wait != nil:
		nj.w = worker.Resume(ws, *l.wait)
	default:
		nj.w = worker.New(ws)
	}
	e.tbl.mu.Lock()
	e.tbl.jobs[j.ID] = nj
	e.tbl.retries.Forget(j.ID)
	e.tbl.mu.Unlock()
	if settle {
		e.settle.add(unsettled{j: nj, rel: rel, res: res})
	}
	nj.w.Start()
	if l.run != nil {
		// Not a start: the run goes on, its pid kept (docs/live-restart.md).
		e.log.Info("job adopted", "job_id", j.ID, "pid", l.run.Run.PID, "run", l.run.Run.ID, "restarts", l.run.Run.Restarts,
			"fencing_token", l.run.Run.Token, "cgroup", e.cgroupPath(j))
		return
	}
	e.log.Info("job starting", "job_id", j.ID, "cgroup", e.cgroupPath(j))
}

// workerSpec is the worker of job j, but for its cgroup and log (Group,
// Log), which a start sets.
func (e *executor) workerSpec(cfg *config.Config, j spec.Job) worker.Spec {
	stop := cfg.Agent.StopTimeout
	if j.Process.StopTimeout > 0 {
		stop = j.Process.StopTimeout
	}
	dir := j.Process.Dir
	if dir == "" {
		dir = "/" // as systemd's WorkingDirectory= defaults for a system service
	}
	return worker.Spec{
		JobID:       j.ID,
		Path:        j.Process.Command[0],
		Args:        j.Process.Command,
		Env:         j.Env(e.cgroupPath(j)),
		Dir:         dir,
		User:        j.Process.User,
		Restart:     j.Process.Restart,
		StopTimeout: stop,
		KillMode:    j.Process.KillMode,
		KillSignal:  j.Process.KillSignal.Number(),
		Runtime:     e.rt,
		Spawner:     e.spawner,
		Notes:       e.notes,
		ClaimFile:   e.claimFilePath(),
		OnChange:    worker.LogTransitions(e.log, j.ID, e.fencing.Load),
	}
}

// fingerprint is the command fingerprint of job j's worker
// (worker.Fingerprint), as plan.Decide compares it with an inherited
// run's.
func (e *executor) fingerprint(cfg *config.Config, j spec.Job) string {
	s := e.workerSpec(cfg, j)
	return worker.Fingerprint(&s, cgroup.JobRel(j.ID, j.Group))
}
